"""The ImageNet builder reads every form people hold ImageNet in, and one set of images gives one benchmark.

One small ImageNet (real wnids, tiny JPEGs, two undecodable ones per damaged class) in each form: class folders,
the official tar of per-class tars and its folder of ``<wnid>.tar`` files, the flat validation tar with the devkit
labels or Kaggle's ``LOC_val_solution.csv``, and timm's Hub WebDataset layouts on the local Hub.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from typer.testing import CliRunner

from dataset_builder.cli import app
from dataset_builder.errors import BenchmarkError
from dataset_builder.hub_source import sample_class
from dataset_builder.imagenet import build_imagenet, removal_lines
from dataset_builder.sources import ClassTarSource, read_val_labels
from image_fixtures import (
    CORRUPT,
    OPTIONS,
    SURVIVORS,
    VAL_CLASSES,
    class_tars,
    devkit,
    folder_images,
    imagenet_tree,
    official_val,
    tar_of,
    wds_shards,
    write_class,
)


@pytest.fixture(scope="module")
def forms(tmp_path_factory, hub_server) -> dict[str, Path | str]:
    root = tmp_path_factory.mktemp("imagenet-forms")
    pool, _ = imagenet_tree(root)
    val = official_val(root)
    pool_images, val_images = folder_images(pool), folder_images(val)
    tars = class_tars(pool, root / "winter21")
    for cid in VAL_CLASSES:
        write_class(root / "train", cid, 6)
    train_tars = class_tars(root / "train", root / "train-tars")
    labels = {name: cid for cid, images in val_images.items() for name in images}
    flat = {name: data for images in val_images.values() for name, data in images.items()}
    (root / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\n"
        + "".join(f"{name[:-5]},{cid} 1 2 3 4\n" for name, cid in sorted(labels.items(), reverse=True))
    )
    api = HfApi(endpoint=hub_server)
    for repo, shards in (
        ("timm-like/imagenet-22k-wds", wds_shards(pool_images, "imagenet22k-train", 3, "22k")),
        (
            "timm-like/imagenet-1k-wds",
            {
                **wds_shards(val_images, "imagenet1k-validation", 2, "1k"),
                **wds_shards({"n01440764": {"n01440764_9.JPEG": b"x"}}, "imagenet1k-train", 1, "1k"),
            },
        ),
    ):
        api.create_repo(repo, repo_type="dataset")
        for name, data in shards.items():
            api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id=repo, repo_type="dataset")
    return {
        "pool": pool,
        "val": val,
        "outer": tar_of(
            root / "winter21_whole.tar", {f"{c}.tar": (tars / f"{c}.tar").read_bytes() for c in pool_images}
        ),
        "tars": tars,
        "train": root / "train",
        "train_tar": tar_of(
            root / "ILSVRC2012_img_train.tar", {f"{c}.tar": (train_tars / f"{c}.tar").read_bytes() for c in VAL_CLASSES}
        ),
        "val_tar": tar_of(root / "ILSVRC2012_img_val.tar", flat),
        "devkit": devkit(root / "ILSVRC2012_devkit_t12.tar.gz", labels),
        "loc": root / "LOC_val_solution.csv",
        "hub_pool": "hf://datasets/timm-like/imagenet-22k-wds",
        "hub_val": "hf://datasets/timm-like/imagenet-1k-wds@main/imagenet1k-validation-*.tar",
    }


def build(root: Path, pool, val, id_classes=VAL_CLASSES, **kwargs) -> Path:
    build_imagenet(root, pool, val, id_classes=id_classes, workers=1, progress=False, **OPTIONS, **kwargs)
    return root


def tree_bytes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_every_source_form_builds_the_same_benchmark(forms, tmp_path, monkeypatch):
    """Each form gives the same bytes; the tar-of-tars build is stopped after its first block and resumed (a kill at
    the same point is :mod:`tests.faults.test_builder_faults`' business: the blocks and markers are the same code)."""
    reference = tree_bytes(build(tmp_path / "folders", forms["pool"], forms["val"], train=forms["train"]))
    manifest = json.loads((tmp_path / "folders" / "manifest.json").read_text())
    assert manifest["classes"]["ood"] == len(SURVIVORS) and manifest["skipped_images"]["count"] == 4
    assert manifest["fit"]["num_images"] == 6 * len(VAL_CLASSES)
    monkeypatch.setenv("COOD_FAULT", "block-done=ENOSPC")
    with pytest.raises(OSError, match="No space left on device") as stopped:
        build(
            tmp_path / "outer-tar+devkit",
            forms["outer"],
            forms["val_tar"],
            val_labels=forms["devkit"],
            train=forms["train_tar"],
        )
    assert stopped.value.filename == str(tmp_path / "outer-tar+devkit.partial" / ".build" / "id-000000.json")
    assert [p.name for p in (tmp_path / "outer-tar+devkit.partial" / ".build").glob("*-*.json")] == ["id-000000.json"]
    monkeypatch.delenv("COOD_FAULT")
    for name, pool, val, labels, train in (
        ("outer-tar+devkit", forms["outer"], forms["val_tar"], forms["devkit"], forms["train_tar"]),
        ("class-tars+kaggle", forms["tars"], forms["val_tar"], forms["loc"], forms["train_tar"]),
        ("hub", forms["hub_pool"], forms["hub_val"], None, forms["train"]),
    ):
        assert tree_bytes(build(tmp_path / name, pool, val, val_labels=labels, train=train)) == reference, name


def test_both_label_files_give_the_same_labels(forms):
    devkit_labels = read_val_labels(forms["devkit"])
    assert devkit_labels == read_val_labels(forms["loc"])
    assert devkit_labels["ILSVRC2012_val_00000001.JPEG"] == VAL_CLASSES[0] and len(devkit_labels) == 20


def test_the_cli_reads_the_official_tars(forms, tmp_path):
    """The command line takes every form: all 1,000 ID classes by default (this small val stops at that check, in words
    of its form), or ``--id-classes N`` of those it holds."""
    args = [
        "imagenet",
        str(tmp_path / "cli"),
        "--imagenet21k",
        str(forms["outer"]),
        "--val",
        str(forms["val_tar"]),
        "--val-labels",
        str(forms["devkit"]),
        "--workers",
        "1",
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 1 and isinstance(done.exception, BenchmarkError)
    assert str(done.exception) == (
        f"{forms['val_tar']} lacks 996 ImageNet-1K classes, e.g. n01443537 "
        "(it holds 4: --id-classes 4 builds a small benchmark of them)"
    )
    assert not (tmp_path / "cli").exists()
    small = ["--id-classes", "4", "--min-images", "6", "--images-per-class", "8", "--test-fraction", "0.25"]
    done = CliRunner().invoke(app, [*args, *small])
    assert done.exit_code == 0, done.output
    built, reference = (
        tree_bytes(tmp_path / "cli"),
        tree_bytes(build(tmp_path / "folders", forms["pool"], forms["val"])),
    )
    assert built.pop("manifest.json") != reference.pop("manifest.json") and built == reference  # same classes, shards
    manifest = json.loads((tmp_path / "cli" / "manifest.json").read_text())
    assert manifest["source"]["id_subset"]["id_classes"] == 4 and manifest["classes"]["id"] == 4
    lines = done.stdout.splitlines()  # after the summary, one line per removal rule with its count
    assert lines[-7:] == removal_lines(manifest) and lines[-8].startswith(f"{tmp_path / 'cli'}: 4 ID classes")
    assert lines[-7].startswith("removed 21,838 of 21,843 pool classes") and " 2 too_few_images: " in lines[-1]


def test_a_truncated_outer_tar_stops_before_anything_is_written(forms, tmp_path):
    import tarfile

    data = Path(forms["outer"]).read_bytes()
    with tarfile.open(forms["outer"]) as tar:
        members = tar.getmembers()
    second = members[1]
    for where, cut_at in (("inside a member", len(data) // 2), ("between two members", members[2].offset)):
        cut = tmp_path / "cut.tar"
        cut.write_bytes(data[:cut_at])
        with pytest.raises(BenchmarkError, match=r"cut.tar is truncated or damaged after n\d+\.tar") as info:
            build(tmp_path / "out", cut, forms["val"])
        assert "\n" not in str(info.value), where
        if where == "between two members":
            assert f"after {second.name} (no end-of-archive block)" in str(info.value)
    assert not list(tmp_path.glob("out*"))


def test_a_corrupt_class_tar_removes_the_class_with_its_reason(forms, tmp_path):
    tars = shutil.copytree(forms["tars"], tmp_path / "tars")
    (tars / f"{CORRUPT}.tar").write_bytes(b"not a tar" * 200)
    out = build(tmp_path / "out", tars, forms["val"], id_classes=VAL_CLASSES[:3])  # 4 OOD classes left: 2 levels of 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["classes"]["removed_by_rule"]["unreadable_source"] == 1
    [entry] = manifest["unreadable_sources"]["classes"]
    assert entry["class_id"] == CORRUPT and "does not read as a tar" in entry["error"] and "\n" not in entry["error"]
    import pandas as pd

    table = pd.read_parquet(out / "classes" / "ood.parquet").set_index("id")
    assert (table.at[CORRUPT, "status"], table.at[CORRUPT, "rule"]) == ("removed", "unreadable_source")
    with pytest.raises(BenchmarkError) as refused:  # 4 ID classes: 2 levels need 5
        build(tmp_path / "four", tars, forms["val"])
    assert str(refused.value) == (
        "4 OOD classes left of the 7 in the source (2 with fewer than --min-images 6 readable images, 1 unreadable); "
        "the benchmark needs at least 5: lower --min-images or give more classes (nothing was written)"
    )
    assert not list(tmp_path.glob("four*"))


def test_a_class_outside_the_pool_stops_the_build_in_one_line(forms, tmp_path):
    tars = shutil.copytree(forms["tars"], tmp_path / "tars")
    shutil.copy(tars / f"{SURVIVORS[0]}.tar", tars / "n99999999.tar")  # no such WordNet synset
    with pytest.raises(BenchmarkError, match=r"has 1 classes that are not imagenet21k classes, e.g. 'n99999999'"):
        build(tmp_path / "out", tars, forms["val"])
    assert not list(tmp_path.glob("out*"))


def test_bad_label_and_hub_inputs_are_one_line_errors(forms, tmp_path):
    with pytest.raises(BenchmarkError, match="labels are for a tar of images"):
        build(tmp_path / "a", forms["pool"], forms["val"], val_labels=forms["devkit"])
    bad = tmp_path / "labels.csv"
    bad.write_text("image,label\n")
    with pytest.raises(BenchmarkError, match="must have the header ImageId,PredictionString"):
        build(tmp_path / "a", forms["pool"], forms["val_tar"], val_labels=bad)
    with pytest.raises(
        BenchmarkError, match="no shard of timm-like/imagenet-1k-wds@[0-9a-f]{40} matches nothing-\\*.tar"
    ):
        build(tmp_path / "a", forms["pool"], "hf://datasets/timm-like/imagenet-1k-wds/nothing-*.tar")
    with pytest.raises(BenchmarkError, match="is not hf://datasets/"):
        build(tmp_path / "a", forms["pool"], "hf://models/x")
    with pytest.raises(
        BenchmarkError, match=r"^s.tar: sample k names no wnid class \(json class_name, or filename <wnid>/<file>\)$"
    ):
        sample_class(
            {"label": 3, "filename": "k.JPEG"}, "k", "s.tar"
        )  # a layout without the class: refused, not guessed
    assert sample_class({"class_name": "n01440764"}, "n01440764_7", "s.tar") == ("n01440764", "n01440764_7.JPEG")
    assert not list(tmp_path.glob("a*"))


def test_a_class_tar_reads_only_its_own_bytes(forms):
    source = ClassTarSource.from_outer_tar(str(forms["outer"]))
    assert source.classes() == sorted(folder_images(Path(forms["pool"])))
    names = source.names(SURVIVORS[0])
    assert names == sorted(p.name for p in (Path(forms["pool"]) / SURVIVORS[0]).iterdir())
    assert source.read(SURVIVORS[0], names[3]) == (Path(forms["pool"]) / SURVIVORS[0] / names[3]).read_bytes()


def test_progress_moves_per_class(forms, tmp_path, monkeypatch):
    from dataset_builder import images

    moves = []

    class Recorder(images.tqdm):
        def update(self, n=1):
            moves.append(n)
            return super().update(n)

    monkeypatch.setattr(images, "tqdm", Recorder)
    build_imagenet(
        tmp_path / "out", forms["outer"], forms["val"], id_classes=VAL_CLASSES, workers=1, progress=True, **OPTIONS
    )
    assert moves == [1] * (len(VAL_CLASSES) + 7)  # 4 ID classes, then 7 OOD candidates in the source, one move each
