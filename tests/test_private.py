"""The private part: a seeded share of each class's test images held back from publication (glyphs, folders,
ImageNet), named by hash in the public manifest, read back and checked, never published."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from typer.testing import CliRunner

from dataset_builder import images
from dataset_builder.benchmark import Benchmark
from dataset_builder.card import card_data
from dataset_builder.cli import app
from dataset_builder.errors import BenchmarkError
from dataset_builder.folder import build_folder
from dataset_builder.glyphs.build import build
from dataset_builder.imagenet import build_imagenet
from dataset_builder.images import ImageSettings
from dataset_builder.private import LINK
from dataset_builder.publish import local_files, publish
from dataset_builder.shards import iter_samples
from glyph_fixtures import TINY
from image_fixtures import OPTIONS, VAL_CLASSES, imagenet_tree, write_class

SHARE, SEED = 0.25, 7  # tiny glyphs: floor(8 * 0.25) = 2 of each class's 8 test images


@pytest.fixture(scope="module")
def held(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("private") / "glyphs"
    build(root, progress=False, workers=1, private_share=SHARE, private_seed=SEED, **TINY)
    return root


def by_key(bench: Benchmark, split: str) -> dict[str, dict]:
    return {s["__key__"]: s for shard in bench.shards(split) for s in iter_samples(bench.shard_path(shard))}


def shard_sums(bench: Benchmark, split: str) -> list[tuple[str, str]]:
    return [(s["path"], s["sha256"]) for s in bench.shards(split)]


def test_public_and_private_test_images_are_the_test_images_of_a_build_without(held, tiny_glyphs):
    public, whole = Benchmark.open(held), Benchmark.open(tiny_glyphs)
    private = public.private_part()
    private.verify(("id_test", "ood_test"))
    for split in ("id_test", "ood_test"):
        shown, kept, every = by_key(public, split), by_key(private, split), by_key(whole, split)
        assert not set(shown) & set(kept) and sorted([*shown, *kept]) == sorted(every)
        assert all(shown[k] == every[k] for k in shown)  # the published images are the same bytes
        assert all(kept[k]["png"] != every[k]["png"] for k in kept)  # rendered from the private seed
        assert all(kept[k]["cls"] == every[k]["cls"] and kept[k]["json"] == every[k]["json"] for k in kept)
        per_class = Counter(json.loads(s["json"])["class_id"] for s in kept.values())
        assert set(per_class.values()) == {2} and len(per_class) == (36 if split == "id_test" else 48)
        assert private.manifest["classes"][split] == dict(sorted(per_class.items()))
    for split in ("id_train", "ood_estimation"):  # the severity levels are computed from what does not change
        assert shard_sums(public, split) == shard_sums(whole, split)
    assert [s["num_samples"] for s in public.shards("ood_test")] == [6] * 48  # one public shard per class still
    assert [s["path"] for s in private.shards("ood_test")] == [s["path"] for s in public.shards("ood_test")]


def test_the_public_manifest_names_the_private_part_by_size_only_and_the_private_part_names_it(held):
    public, private = Benchmark.open(held), Benchmark.open(held).private_part()
    assert private.manifest[LINK] == public.sha256
    assert public.manifest["private"] == {
        "share": SHARE,
        "rule": private.manifest["private"]["rule"],
        "num_images": {"id_test": 36 * 2, "ood_test": 48 * 2},
    }
    assert private.manifest["private"]["seed"] == SEED and private.manifest["part"] == "private"
    text = (held / "manifest.json").read_text()
    keys = {*by_key(private, "id_test"), *by_key(private, "ood_test")}
    assert not [k for k in keys if k in text]
    assert not [s for s in public.manifest["shards"] if s["path"].startswith("private")]
    assert "seed" not in public.manifest["private"]
    assert private.id_classes.equals(public.id_classes) and private.shards("ood_estimation") == []


def test_the_same_seed_gives_the_same_bytes_and_none_draws_a_secret_one(held, tmp_path):
    options = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k != "pool_size"]
    runner = CliRunner()
    done = runner.invoke(
        app,
        ["glyphs", str(tmp_path / "again"), "--pool-size=48", "--workers=1", *options, f"--private-share={SHARE}"]
        + [f"--private-seed={SEED}"],
    )
    assert done.exit_code == 0, done.output
    assert tree(tmp_path / "again") == tree(held)
    build(tmp_path / "drawn", progress=False, workers=1, private_share=SHARE, **TINY)
    drawn, kept = Benchmark.open(tmp_path / "drawn"), Benchmark.open(held)
    seed = drawn.private_part().manifest["private"]["seed"]
    assert isinstance(seed, int) and seed != SEED
    assert str(seed) not in (tmp_path / "drawn" / "manifest.json").read_text()
    # the glyphs' published part, its manifest included, does not depend on the private seed: its identity is one
    published = {p: b for p, b in tree(held).items() if not p.startswith("private/")}
    assert {p: b for p, b in tree(tmp_path / "drawn").items() if not p.startswith("private/")} == published
    assert drawn.identity() == kept.identity() and drawn.private_part().sha256 != kept.private_part().sha256
    other, mine = by_key(drawn.private_part(), "ood_test"), by_key(kept.private_part(), "ood_test")
    assert sorted(other) == sorted(mine) and all(other[k]["png"] != mine[k]["png"] for k in mine)
    refused = runner.invoke(app, ["glyphs", str(tmp_path / "no"), "--private-share=0.6"])
    assert refused.exit_code == 2 and "--private-share" in refused.output and not (tmp_path / "no").exists()


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_wrong_or_missing_private_part_is_one_line(held, tmp_path, tiny_glyphs):
    root = tmp_path / "copy"
    shutil.copytree(held, root)
    with pytest.raises(BenchmarkError, match="has no private part") as no_part:
        Benchmark.open(tiny_glyphs).private_part()
    moved = tmp_path / "kept-by-the-operator"
    (root / "private").rename(moved)
    assert Benchmark.open(root).private_part(moved).sha256 == Benchmark.open(held).private_part().sha256
    with pytest.raises(BenchmarkError, match="is not at") as missing:
        Benchmark.open(root).private_part()
    manifest = moved / "manifest.json"
    sha = Benchmark.open(root).sha256
    manifest.write_text(manifest.read_text().replace(sha, "0" * 64))  # another benchmark's private part
    with pytest.raises(BenchmarkError, match="not the private part of benchmark glyphs .*names manifest 000") as other:
        Benchmark.open(root).private_part(moved)
    manifest.write_text("{not json")
    with pytest.raises(BenchmarkError, match="not valid JSON") as broken:
        Benchmark.open(root).private_part(moved)
    assert all(len(str(e.value).splitlines()) == 1 for e in (no_part, missing, other, broken))


def test_publishing_never_uploads_the_private_part(held, tmp_path, hub_server):
    assert not [p for p in local_files(held) if p.startswith("private")]
    card = card_data(held).to_dict()
    assert "private" not in json.dumps(card["configs"])
    publish(held, "cood/private-part", tag="v1", endpoint=hub_server)
    remote = HfApi(endpoint=hub_server).list_repo_files("cood/private-part", repo_type="dataset", revision="v1")
    assert "manifest.json" in remote and not [p for p in remote if p.startswith("private")]
    assert sorted(p for p in remote if p != ".gitattributes") == sorted(local_files(held))


SETTINGS = ImageSettings(images_per_class=4, n_test=2, min_images=4, ood_classes_per_shard=1, id_classes_per_shard=1)


def image_folders(root: Path) -> tuple[Path, Path]:
    for cid in ("cat", "dog"):
        write_class(root / "id", cid, 4)
    for cid in ("ant", "bee", "owl"):
        write_class(root / "ood", cid, 5)
    return root / "id", root / "ood"


def test_a_folder_benchmark_holds_back_source_images(tmp_path):
    id_dir, ood_dir = image_folders(tmp_path)
    kw = dict(workers=1, progress=False)
    build_folder(tmp_path / "whole", id_dir, ood_dir, settings=SETTINGS, **kw)
    held = ImageSettings(**{**SETTINGS.__dict__, "private_share": 0.5, "private_seed": 3})
    build_folder(tmp_path / "held", id_dir, ood_dir, settings=held, **kw)
    whole, public = Benchmark.open(tmp_path / "whole"), Benchmark.open(tmp_path / "held")
    private = public.private_part()
    for split, per_class in (("id_test", 2), ("ood_test", 1)):
        shown, kept, every = by_key(public, split), by_key(private, split), by_key(whole, split)
        assert {**shown, **kept} == every and not set(shown) & set(kept)  # the source's bytes, split in two
        assert set(private.manifest["classes"][split].values()) == {per_class}
    assert shard_sums(public, "ood_estimation") == shard_sums(whole, "ood_estimation")
    assert public.manifest["image_formats"] == {"JPEG": 2 * 2 + 3 * (1 + 2)}  # the published images
    assert public.manifest["private"]["num_images"] == {"id_test": 4, "ood_test": 3}
    assert public.id_classes["num_images"].tolist() == [2, 2]


def test_an_interrupted_build_resumes_with_the_seed_it_drew(tmp_path, monkeypatch):
    id_dir, ood_dir = image_folders(tmp_path)
    settings = ImageSettings(**{**SETTINGS.__dict__, "private_share": 0.5})
    real, calls = images.run_block, []

    def failing(task):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(task[1].name)
        return real(task)

    monkeypatch.setattr(images, "run_block", failing)
    with pytest.raises(KeyboardInterrupt):
        build_folder(tmp_path / "b", id_dir, ood_dir, settings=settings, workers=1, progress=False)
    drawn = json.loads((tmp_path / "b.partial" / ".build" / "config.json").read_text())["settings"]["private_seed"]
    monkeypatch.setattr(images, "run_block", real)
    build_folder(tmp_path / "b", id_dir, ood_dir, settings=settings, workers=1, progress=False)
    assert isinstance(drawn, int) and Benchmark.open(tmp_path / "b").private_part().manifest["private"]["seed"] == drawn
    fresh = ImageSettings(**{**settings.__dict__, "private_seed": drawn})
    build_folder(tmp_path / "fresh", id_dir, ood_dir, settings=fresh, workers=1, progress=False)
    assert tree(tmp_path / "b") == tree(tmp_path / "fresh")


def test_the_imagenet_builder_holds_back_its_share(tmp_path):
    root = tmp_path / "imagenet"
    build_imagenet(
        root,
        *imagenet_tree(tmp_path),
        id_classes=VAL_CLASSES,
        workers=1,
        progress=False,
        private_share=0.5,
        private_seed=1,
        **OPTIONS,
    )
    public = Benchmark.open(root)
    private = public.private_part()
    private.verify(("id_test", "ood_test"))
    assert private.manifest["classes"]["id_test"] == {c: 2 for c in VAL_CLASSES}  # floor(5 * 0.5) of 5 each
    assert set(private.manifest["classes"]["ood_test"].values()) == {1}  # floor(2 * 0.5) of 2 test images each
    assert sum(s["num_samples"] for s in public.shards("id_test")) == 3 * len(VAL_CLASSES)
    with pytest.raises(BenchmarkError, match="between 0 and 0.5"):
        build_imagenet(tmp_path / "no", tmp_path / "imagenet21k", tmp_path / "val", private_share=0.9)


def test_the_folder_command_takes_the_private_options(tmp_path):
    id_dir, ood_dir = image_folders(tmp_path)
    options = ["--images-per-class=4", "--test-fraction=0.5", "--min-images=4", "--workers=1"]
    done = CliRunner().invoke(
        app,
        ["folder", str(tmp_path / "b"), "--id", str(id_dir), "--ood", str(ood_dir), *options, "--private-share=0.5"]
        + ["--private-seed=3"],
    )
    assert done.exit_code == 0, done.output
    assert f"; 7 test images held back in {tmp_path / 'b' / 'private'}" in done.output  # 2 x 2 ID, 3 x 1 OOD
    private = Benchmark.open(tmp_path / "b").private_part()
    assert private.manifest["private"]["seed"] == 3 and len(private.shards("ood_test")) == 3
