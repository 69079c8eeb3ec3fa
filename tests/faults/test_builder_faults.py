"""Builder faults: nothing the user owns is lost or changed, whatever fails and wherever a build is stopped.

Every command runs as its own process (``cood-dataset``), so a build can be killed at a named point
(``COOD_FAULT``, see :mod:`dataset_builder.faults`) and errors are seen as a user sees them. Each case
compares the sha256 of every file of the trees involved before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from dataset_builder.assemble import ASIDE
from dataset_builder.embedded import embedded_benchmark
from dataset_builder.folder import build_folder
from dataset_builder.glyphs.build import build as build_glyphs
from dataset_builder.images import ImageSettings
from image_fixtures import imagenet_tree, write_class

REPO = Path(__file__).resolve().parents[2]
GLYPHS = dict(
    pool_size=2,
    images_per_class=3,
    n_test=2,
    id_test_per_class=7,
    id_train_per_class=0,
    private_share=0.15,
    private_seed=3,
)  # what GLYPH_ARGS give: one private ID test image per class, the command line's private share
GLYPH_ARGS = [
    "--pool-size",
    "2",
    "--images-per-class",
    "3",
    "--n-test",
    "2",
    "--id-test-per-class",
    "7",
    "--id-train-per-class",
    "0",
    "--private-seed",
    "3",
    "--workers",
    "1",
]
SETTINGS = ImageSettings(images_per_class=4, n_test=1, min_images=4)  # what FOLDER_ARGS give
FOLDER_ARGS = ["--images-per-class", "4", "--test-fraction", "0.25", "--min-images", "4", "--workers", "1"]


def cood_dataset(*args: str | Path, fault: str | None = None, cache: Path | None = None) -> subprocess.CompletedProcess:
    """``cood-dataset ARGS`` in a fresh process of this checkout; ``fault`` stops it at that point."""
    env = {k: v for k, v in os.environ.items() if k not in ("COOD_FAULT", "COOD_DEBUG")}
    env["PYTHONPATH"] = str(REPO)
    env.update({"COOD_FAULT": fault} if fault else {})
    env.update({"COOD_BENCH_CACHE": str(cache)} if cache else {})
    code = "import sys; sys.argv[0] = 'cood-dataset'; from dataset_builder.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def tree_hashes(root: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every file under ``root`` (links: ``-> target``), and every folder."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel + "/"] = "folder"
    return out


def assert_one_line_error(result: subprocess.CompletedProcess, code: int, pattern: str) -> None:
    """Exit ``code``, no traceback, and one ``error:`` line (the last; progress bars may come before it)."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in re.split(r"[\r\n]+", result.stderr) if line.strip()]
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]]
    assert re.fullmatch(f"error: {pattern}", lines[-1]), lines[-1]


def leftovers(out: Path) -> list[str]:
    """Names beside ``out`` that a build derives from it (``out.partial``, ``out.cood-old``, ...)."""
    return (
        sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name + ".")) if out.parent.is_dir() else []
    )


# ---------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """Image folders for the folder builder (``id``, ``ood``) and the ImageNet builder (``imagenet21k``, ``val``)."""
    root = tmp_path_factory.mktemp("sources")
    for cid in ("cat", "dog"):
        write_class(root / "id", cid, 3)
    for cid in ("ant", "bee"):
        write_class(root / "ood", cid, 5)
    pool, val = imagenet_tree(root / "imagenet")
    return {"id": root / "id", "ood": root / "ood", "imagenet21k": pool, "val": val}


@pytest.fixture(scope="module")
def folder_benchmarks(sources, tmp_path_factory) -> dict[int, Path]:
    """Folder benchmarks of seed 0 (the one to keep or replace) and seed 1 (what a replacement must give)."""
    root = tmp_path_factory.mktemp("folder-benchmarks")
    for seed in (0, 1):
        build_folder(
            root / f"seed{seed}",
            sources["id"],
            sources["ood"],
            settings=ImageSettings(**{**SETTINGS.__dict__, "seed": seed}),
            workers=1,
            progress=False,
        )
    return {seed: root / f"seed{seed}" for seed in (0, 1)}


@pytest.fixture(scope="module")
def glyph_benchmarks(tmp_path_factory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("glyph-benchmarks")
    for seed in (0, 1):
        build_glyphs(root / f"seed{seed}", seed=seed, workers=1, progress=False, **GLYPHS)
    return {seed: root / f"seed{seed}" for seed in (0, 1)}


def build_args(builder: str, out: Path, sources: dict[str, Path], seed: int = 0) -> list:
    """The command line that builds ``out`` with ``builder`` from the test sources."""
    if builder == "glyphs":
        return ["glyphs", out, *GLYPH_ARGS, "--seed", seed]
    if builder == "folder":
        return ["folder", out, "--id", sources["id"], "--ood", sources["ood"], *FOLDER_ARGS, "--seed", seed]
    return [
        "imagenet",
        out,
        "--imagenet21k",
        sources["imagenet21k"],
        "--val",
        sources["val"],
        *FOLDER_ARGS,
        "--seed",
        seed,
    ]


def user_folder(root: Path) -> Path:
    """A folder of the user's that is not a benchmark."""
    (root / "sub").mkdir(parents=True)
    (root / "notes.txt").write_text("mine\n")
    (root / "sub" / "data.bin").write_bytes(bytes(range(256)))
    return root


# ---------------------------------------------------------------------------------------------------- targets


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("builder", ["glyphs", "folder", "imagenet"])
def test_an_existing_folder_that_is_not_a_benchmark_is_refused_and_untouched(builder, overwrite, sources, tmp_path):
    out = user_folder(tmp_path / "out")
    before = tree_hashes(out)
    result = cood_dataset(*build_args(builder, out, sources), *(["--overwrite"] if overwrite else []))
    assert_one_line_error(
        result,
        2,
        f"{re.escape(str(out))} exists and is not a benchmark folder "
        r"\(no readable manifest.json\); refusing to replace it",
    )
    assert tree_hashes(out) == before
    assert leftovers(out) == []


@pytest.mark.parametrize("builder", ["glyphs", "folder", "imagenet"])
def test_an_existing_benchmark_is_kept_without_overwrite(builder, sources, folder_benchmarks, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(folder_benchmarks[0], out)
    before = tree_hashes(out)
    result = cood_dataset(*build_args(builder, out, sources, seed=1))
    assert_one_line_error(result, 2, f"{re.escape(str(out))} already holds a benchmark; pass --overwrite to replace it")
    assert tree_hashes(out) == before
    assert leftovers(out) == []


def test_overwrite_without_an_out_folder_is_refused(tmp_path):
    result = cood_dataset("glyphs", "--overwrite", *GLYPH_ARGS, cache=tmp_path / "cache")
    assert_one_line_error(
        result, 2, re.escape("--overwrite needs an OUT folder (the cache is built once per set of options)")
    )
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("builder", ["glyphs", "folder"])
def test_an_output_folder_under_a_regular_file_is_one_line(builder, sources, tmp_path):
    blocker = tmp_path / "somefile"
    blocker.write_bytes(b"not a folder\n")
    result = cood_dataset(*build_args(builder, blocker / "out", sources))
    assert_one_line_error(result, 1, f"{re.escape(str(blocker))}/out\\.partial.*: Not a directory")
    assert blocker.read_bytes() == b"not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["somefile"]


# ---------------------------------------------------------------------------------------------------- stopped builds

KILLS = [
    ("folder", "shard-done", 0),
    ("folder", "block-done", 0),
    ("folder", "swap-before", 0),
    ("folder", "swap-aside", 0),
    ("folder", "swap-in", 1),
    ("glyphs", "swap-aside", 0),
    ("glyphs", "swap-in", 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("builder,point,kept", KILLS)
def test_a_build_killed_at_a_fault_point_keeps_a_whole_benchmark(
    builder, point, kept, sources, folder_benchmarks, glyph_benchmarks, tmp_path
):
    """Killed while replacing seed 0 by seed 1: one whole benchmark survives (``kept``: the seed the next run finds),
    the next run without --overwrite refuses, and one with --overwrite builds exactly seed 1."""
    benchmarks = folder_benchmarks if builder == "folder" else glyph_benchmarks
    old, new = tree_hashes(benchmarks[0]), tree_hashes(benchmarks[1])
    out = tmp_path / "out"
    shutil.copytree(benchmarks[0], out)
    args = build_args(builder, out, sources, seed=1)

    killed = cood_dataset(*args, "--overwrite", fault=point)
    assert killed.returncode == 137, killed.stderr
    aside = out.with_name(out.name + ASIDE)
    survivors = [tree_hashes(p) for p in (out, aside) if p.exists()]
    assert (old in survivors) or (new in survivors)

    refused = cood_dataset(*args)
    assert_one_line_error(
        refused, 2, f"{re.escape(str(out))} already holds a benchmark; pass --overwrite to replace it"
    )
    assert tree_hashes(out) == (old, new)[kept]
    assert not aside.exists()

    rerun = cood_dataset(*args, "--overwrite")
    assert rerun.returncode == 0, rerun.stderr
    assert tree_hashes(out) == new
    assert leftovers(out) == []


@pytest.mark.parametrize(
    "builder,point",
    [("glyphs", "shard-done"), ("glyphs", "swap-aside"), ("folder", "swap-before"), ("folder", "swap-aside")],
)
def test_an_oserror_while_replacing_is_one_line_and_keeps_the_old_benchmark(
    builder, point, sources, folder_benchmarks, glyph_benchmarks, tmp_path
):
    benchmarks = folder_benchmarks if builder == "folder" else glyph_benchmarks
    out = tmp_path / "out"
    shutil.copytree(benchmarks[0], out)
    result = cood_dataset(*build_args(builder, out, sources, seed=1), "--overwrite", fault=f"{point}=ENOSPC")
    where = re.escape(str(out)) + (r"\.partial/\S+\.tar" if point == "shard-done" else "")  # the file being written
    assert_one_line_error(result, 1, f"{where}: No space left on device")
    assert tree_hashes(out) == tree_hashes(benchmarks[0])
    assert leftovers(out) == []


# ---------------------------------------------------------------------------------------------------- manifests


def _escaping_link(bench: Path, manifest: dict) -> None:
    outside = bench.parent / "outside.tar"
    outside.write_bytes(b"secret\n")
    (bench / "ood" / "link.tar").symlink_to(outside)
    manifest["shards"][0]["path"] = "ood/link.tar"


def _escaping_folder_link(bench: Path, manifest: dict) -> None:
    (bench.parent / "elsewhere").mkdir()
    shutil.copy(bench / manifest["shards"][0]["path"], bench.parent / "elsewhere" / "000000.tar")
    (bench / "linked").symlink_to(bench.parent / "elsewhere")
    manifest["shards"][0]["path"] = "linked/000000.tar"


ESCAPES = {
    "absolute": lambda bench, m: m["shards"][0].update(path="/etc/passwd"),
    "parent": lambda bench, m: m["shards"][0].update(path="../outside.tar"),
    "parent inside": lambda bench, m: m["shards"][0].update(path="id/../../outside.tar"),
    "file link": _escaping_link,
    "folder link": _escaping_folder_link,
}


@pytest.mark.parametrize("escape", list(ESCAPES))
def test_a_shard_path_outside_the_benchmark_is_refused(escape, folder_benchmarks, tmp_path):
    bench = tmp_path / "bench"
    shutil.copytree(folder_benchmarks[0], bench)
    manifest = json.loads((bench / "manifest.json").read_text())
    ESCAPES[escape](bench, manifest)
    (bench / "manifest.json").write_text(json.dumps(manifest))
    before = tree_hashes(tmp_path)
    result = cood_dataset("card", bench)
    path = re.escape(repr(manifest["shards"][0]["path"]))
    assert_one_line_error(
        result,
        2,
        f"{re.escape(str(bench / 'manifest.json'))}: shards\\[0\\]\\.path {path} is outside the benchmark folder",
    )
    assert tree_hashes(tmp_path) == before


BAD_MANIFESTS = {
    "truncated": (
        b'{"format_version": 1, "shards": [',
        r"is not valid JSON: Expecting value: line 1 column 34 \(char 33\)",
    ),
    "deeply nested": (b"[" * 100_000 + b"]" * 100_000, "is not a manifest: JSON nested too deeply"),
    "not an object": (b"[1, 2]", "is not a manifest: not a JSON object"),
    "not utf-8": (b"\xff\xfe{}", "is not valid JSON: .*"),
    "shards not a list": (
        b'{"format_version": 1, "shards": {"path": "a.tar"}}',
        "shards must be a list of objects with a path",
    ),
    "bad pixel limit": (
        b'{"format_version": 1, "max_image_pixels": -1, "shards": []}',
        "max_image_pixels must be a positive integer, got -1",
    ),
}


@pytest.mark.parametrize("case", list(BAD_MANIFESTS))
def test_a_malformed_manifest_is_one_line_naming_the_file(case, folder_benchmarks, tmp_path):
    data, message = BAD_MANIFESTS[case]
    bench = tmp_path / "bench"
    shutil.copytree(folder_benchmarks[0], bench)
    (bench / "manifest.json").write_bytes(data)
    before = tree_hashes(bench)
    result = cood_dataset("card", bench)
    assert_one_line_error(result, 2, f"{re.escape(str(bench / 'manifest.json'))}:? {message}")
    assert tree_hashes(bench) == before


# ---------------------------------------------------------------------------------------------------- images


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` x ``height`` 1-bit pixels (signature, IHDR, an empty IDAT, IEND): a few bytes."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    "width,height,reason",
    [
        (9000, 8000, "ImageTooLarge: 9000x8000 pixels, above max_image_pixels 67108864"),
        (100_000, 100_000, "DecompressionBombError: .*"),
    ],
)
def test_an_image_above_the_pixel_limit_is_skipped_and_counted(width, height, reason, sources, tmp_path):
    id_dir = tmp_path / "id"
    shutil.copytree(sources["id"], id_dir)
    (id_dir / "cat" / "huge.png").write_bytes(png_header(width, height))
    before = tree_hashes(id_dir)
    out = tmp_path / "out"
    result = cood_dataset("folder", out, "--id", id_dir, "--ood", sources["ood"], *FOLDER_ARGS)
    assert result.returncode == 0, result.stderr
    assert "2 ID classes, 2 OOD classes, 1 unreadable or oversized images skipped" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["max_image_pixels"] == 2**26
    [skipped] = manifest["skipped_images"]["images"]
    assert (skipped["class_id"], skipped["file"]) == ("cat", "huge.png")
    assert re.fullmatch(reason, skipped["error"]), skipped["error"]
    assert tree_hashes(id_dir) == before


def test_the_harness_refuses_an_image_above_the_benchmarks_limit(folder_benchmarks, tmp_path):
    import torch

    from dataset_builder.benchmark import Benchmark
    from harness.runtime.data import ShardStream
    from harness.runtime.decoding import PilDecoder

    bench = tmp_path / "bench"
    shutil.copytree(folder_benchmarks[0], bench)
    manifest = json.loads((bench / "manifest.json").read_text())
    (bench / "manifest.json").write_text(json.dumps({**manifest, "max_image_pixels": 255}))  # the images are 16x16
    benchmark = Benchmark.open(bench)
    shard = benchmark.shards("id_test")[0]
    decoder = PilDecoder(lambda image: torch.zeros(3), 3, benchmark.max_image_pixels)
    stream = ShardStream(benchmark, [[shard]], decoder, label_of={"cat": 0, "dog": 1}, batch_size=2)
    assert list(stream) == [
        {
            "shard": shard["path"],
            "error": f"shard {shard['path']}: sample cat__cat_0 is 16x16 pixels, "
            "above the benchmark's max_image_pixels (255)",
        }
    ]


def test_a_bad_sample_record_is_one_line_naming_the_sample(folder_benchmarks, tmp_path):
    """A sample whose JSON record is missing or broken, or names a class outside the split or not as a string; the
    batch of good samples before it still comes through."""
    from dataclasses import asdict

    import torch

    from dataset_builder.benchmark import Benchmark
    from dataset_builder.shards import read_shard, write_shard
    from harness.runtime.data import ShardStream
    from harness.runtime.decoding import PilDecoder

    bench = tmp_path / "bench"
    shutil.copytree(folder_benchmarks[0], bench)
    benchmark = Benchmark.open(bench)
    good = list(read_shard(benchmark.shard_path(benchmark.shards("id_test")[0])))[:2]
    ext = benchmark.image_ext
    decoder = PilDecoder(lambda image: torch.zeros(3), 3, benchmark.max_image_pixels)
    for bad, reason in [
        ({"__key__": "bad", ext: good[0][ext]}, r"cannot be decoded \(KeyError: 'json'\)"),
        ({**good[0], "__key__": "bad", "json": b"{not json"}, r"cannot be decoded \(JSONDecodeError: "),
        ({**good[0], "__key__": "bad", "json": b'{"class_id": ["cat"]}'}, r"cannot be decoded \(TypeError: "),
        ({**good[0], "__key__": "bad", "json": b'{"class_id": "owl"}'}, r"has class 'owl', which is not in this split"),
    ]:
        shard = asdict(write_shard(bench, "id/test/bad.tar", "id_test", [*good, bad], copy=False))  # the harness's tar
        label_of = {json.loads(good[0]["json"])["class_id"]: 7}
        stream = ShardStream(benchmark, [[shard]], decoder, label_of=label_of, batch_size=2)
        assert [b["labels"].tolist() for b in stream if "labels" in b] == [[7, 7]]
        [error] = [b["error"] for b in stream if "error" in b]
        assert re.match(rf"(corrupt shard|shard) id/test/bad.tar: sample bad {reason}", error) and "\n" not in error, (
            error
        )


# ---------------------------------------------------------------------------------------------------- the cache


def test_a_built_cache_is_read_without_writing(tmp_path, monkeypatch):
    """A cache the user cannot write to (its lock path cannot be opened) still serves a built benchmark."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("COOD_BENCH_CACHE", str(cache))
    folder = embedded_benchmark("glyphs", progress=False, workers=1, **GLYPHS)
    lock = Path(str(folder) + ".lock")
    lock.unlink(missing_ok=True)
    lock.mkdir()  # taking the lock would fail: opening a folder for writing
    before = tree_hashes(cache)
    result = cood_dataset("glyphs", *GLYPH_ARGS, cache=cache)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{folder}: 36 ID classes, 2 OOD classes, 0 unreadable or oversized images skipped")
    assert tree_hashes(cache) == before
