"""The shards' Parquet copies (format 3): the tar's rows and image bytes, the features ``datasets`` reads, listed and
checked by the manifest."""

from __future__ import annotations

import json
import shutil

import datasets
import pyarrow.parquet as pq
import pytest

from dataset_builder.benchmark import Benchmark
from dataset_builder.copies import FILE_FEATURES, copy_path
from dataset_builder.errors import BenchmarkError
from dataset_builder.shards import file_sha256, read_shard


def test_each_copy_holds_its_tars_rows_with_the_same_image_bytes(tiny_glyphs):
    bench = Benchmark.open(tiny_glyphs)
    shards = bench.manifest["shards"]
    assert all(s["parquet"]["path"] == copy_path(s["path"]) for s in shards)
    for shard in (bench.shards("id_test")[0], bench.shards("ood_test")[5]):
        copy = tiny_glyphs / shard["parquet"]["path"]
        assert file_sha256(copy) == shard["parquet"]["sha256"] and copy.stat().st_size == shard["parquet"]["num_bytes"]
        rows = pq.read_table(copy).to_pylist()
        samples = list(read_shard(tiny_glyphs / shard["path"]))
        assert len(rows) == len(samples) == shard["num_samples"]
        assert rows == [
            {
                "image": {"bytes": s["png"], "path": None},
                "label": int(s["cls"]),
                "key": s["__key__"],
                "class_id": json.loads(s["json"])["class_id"],
            }
            for s in samples
        ]
        assert datasets.Features.from_arrow_schema(pq.read_schema(copy)) == FILE_FEATURES  # datasets' own metadata
    loaded = datasets.load_dataset("parquet", data_files=str(copy), split="train")  # a copy alone, without the card
    assert isinstance(loaded.features["image"], datasets.Image) and loaded[0]["image"].size == (32, 32)


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_verify_names_a_damaged_or_missing_copy(damage, tiny_glyphs, tmp_path):
    root = shutil.copytree(tiny_glyphs, tmp_path / "glyphs")
    copy = root / Benchmark.open(root).shards("ood_test")[3]["parquet"]["path"]
    copy.unlink() if damage == "missing" else copy.write_bytes(copy.read_bytes()[:-10])
    relpath = copy.relative_to(root).as_posix()
    message = (
        f"shard {relpath} listed in the manifest is missing" if damage == "missing" else f"corrupt shard {relpath}"
    )
    with pytest.raises(BenchmarkError, match=message):
        Benchmark.open(root).verify()


def test_a_copy_entry_outside_the_folder_is_refused(tiny_glyphs, tmp_path):
    root = shutil.copytree(tiny_glyphs, tmp_path / "glyphs")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["shards"][0]["parquet"]["path"] = "../elsewhere.parquet"
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BenchmarkError, match=r"shards\[0\]\.parquet\.path '\.\./elsewhere\.parquet' is outside"):
        Benchmark.open(root)
    del manifest["shards"][0]["parquet"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BenchmarkError, match=r"shards\[0\]\.parquet must be an object with a path"):
        Benchmark.open(root)
