"""The embedded glyph benchmark: class rules with reasons, layout, determinism."""

import json

import pandas as pd
import pytest

from dataset_builder.benchmark import Benchmark
from dataset_builder.glyphs import classes
from dataset_builder.glyphs.build import build
from dataset_builder.shards import iter_samples
from glyph_fixtures import TINY


def row(table, char):
    return table[table["char"] == char].iloc[0]


def test_class_rules_mirror_the_imagenet_filtering():
    table = classes.classify()
    assert (table["status"] == "id").sum() == 36
    accented = row(table, "Á")  # decomposes to A: the "hyponym" case
    assert (accented["status"], accented["rule"], accented["collides_with"], accented["detail"]) == (
        "removed",
        "unicode_relation",
        "u0041",
        "decomposition",
    )
    assert row(table, "a")["rule"] == "unicode_relation" and row(table, "a")["collides_with"] == "u0041"
    stroke = row(table, "Ø")  # LATIN CAPITAL LETTER O WITH STROKE: tied to O by its name only
    assert (stroke["collides_with"], stroke["detail"]) == ("u004f", "name")
    alpha = row(table, "Α")  # GREEK CAPITAL LETTER ALPHA draws exactly like A
    assert (alpha["rule"], alpha["collides_with"]) == ("visually_ambiguous", "u0041")
    assert row(table, "З")["collides_with"] == "u0033"  # Cyrillic Ze vs digit three
    assert row(table, "Ж")["status"] == "ood"
    assert row(table, "\u0301")["rule"] == "not_a_glyph"  # a combining mark
    removed = table[table["status"] == "removed"]
    assert removed["rule"].notna().all()
    assert set(removed["rule"]) <= set(classes.RULES)
    pool = table[table["status"] == "ood"]
    assert len(pool) > 800
    assert not pool["char"].isin(list(classes.ID_CHARS)).any()
    assert all(classes.unicode_relation(c) is None for c in pool["char"])


def test_visually_ambiguous_rule_set_switches_off():
    table = classes.classify({"visually_ambiguous": False})
    assert row(table, "Α")["status"] == "ood"
    assert "visually_ambiguous" not in set(table["rule"].dropna())


def test_layout_counts_and_split(tiny_glyphs):
    bench = Benchmark.open(tiny_glyphs)
    bench.verify()
    manifest = bench.manifest
    assert manifest["classes"]["id"] == 36 and manifest["classes"]["ood"] == 48
    assert len(bench.ood_classes) == 48 and bench.ood_classes["index"].tolist() == list(range(48))
    test_shards = bench.shards("ood_test")
    assert len(test_shards) == 48  # one class per test shard
    assert all(s["path"].startswith("ood/test/000/") and s["num_samples"] == 8 for s in test_shards)
    assert sum(s["num_samples"] for s in bench.shards("ood_estimation")) == 48 * 16
    assert sum(s["num_samples"] for s in bench.shards("id_test")) == 36 * 8
    estimation = {s["__key__"] for sh in bench.shards("ood_estimation") for s in iter_samples(bench.shard_path(sh))}
    test = {s["__key__"] for sh in test_shards for s in iter_samples(bench.shard_path(sh))}
    assert len(estimation) == 48 * 16 and not estimation & test
    sample = next(iter_samples(bench.shard_path(test_shards[0])))
    assert set(sample) == {"__key__", "png", "cls", "json"} and "." not in sample["__key__"]
    assert json.loads(sample["json"])["class_id"] == test_shards[0]["class_id"]
    pool = bench.ood_classes.set_index("id")
    assert (
        int(sample["cls"])
        == 36 + pool.at[test_shards[0]["class_id"], "index"]
        == pool.at[test_shards[0]["class_id"], "label"]
    )
    assert bench.id_classes["label"].tolist() == list(range(36))
    assert pool["label"].tolist() == list(range(36, 36 + 48))  # no image rule: the number of ID classes + pool index
    assert sample["png"][:8] == b"\x89PNG\r\n\x1a\n"
    removed = pd.read_parquet(tiny_glyphs / "classes" / "ood.parquet").query("status == 'removed'")
    assert removed["rule"].notna().all() and "not_sampled" in set(removed["rule"])


@pytest.mark.slow
def test_rebuild_is_byte_identical(tiny_glyphs, tmp_path):
    again = tmp_path / "again"
    build(again, progress=False, workers=1, **TINY)
    files = sorted(p.relative_to(tiny_glyphs) for p in tiny_glyphs.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (tiny_glyphs / rel).read_bytes() == (again / rel).read_bytes(), rel
    other = tmp_path / "other-seed"
    build(other, progress=False, **{**TINY, "seed": 1})
    assert (other / "manifest.json").read_bytes() != (tiny_glyphs / "manifest.json").read_bytes()
