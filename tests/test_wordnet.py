"""WordNet table and the ImageNet class rules, on the real WordNet 3.0 graph and timm's ImageNet lists."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from dataset_builder.errors import BenchmarkError
from dataset_builder.imagenet_classes import (
    COLUMNS,
    DEFAULT_RULE_SETS,
    ID_CLASSES,
    POOLS,
    RULE_SETS,
    classify_pool,
    imagenet_ood_classes,
    read_synsets,
    rules_record,
)
from dataset_builder.wordnet import (
    DEBIAN_DATA_NOUN,
    TABLE,
    ancestor_distances,
    closest_relatives,
    dumps_table,
    generate,
    load_parents,
    parse_data_noun,
    relation_removals,
)

DOG, DALMATIAN, LION, LION_CUB = "n02084071", "n02110341", "n02129165", "n01322898"
AVOCADO, CUE_BALL, PING_PONG_BALL, VICEROY, MONARCH = "n07764847", "n03145719", "n03942813", "n02277268", "n02279972"


@pytest.fixture(scope="module")
def parents():
    return load_parents()


@pytest.fixture(scope="module")
def id_classes():
    return read_synsets(ID_CLASSES)


@pytest.fixture(scope="module")
def pool_default():
    return imagenet_ood_classes()


def test_committed_table_regenerates_from_debian_wordnet(tmp_path):
    # .ci/run installs the Debian package wordnet-base; without it this check cannot run, so it fails.
    assert DEBIAN_DATA_NOUN.is_file(), "install the Debian package wordnet-base (WordNet 3.0 data.noun)"
    out = tmp_path / "table.tsv.gz"
    assert generate(DEBIAN_DATA_NOUN, out) == 82115
    assert out.read_bytes() == TABLE.read_bytes()


def test_parse_data_noun_keeps_hypernyms_and_instance_hypernyms_only():
    lines = [
        "  1 This software and database is being provided to you\n",
        "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 ~ 00002137 n 0000 ~ 04424418 n 0000 | that which is\n",
        "01440764 05 n 02 tench 0 Tinca_tinca 0 002 @ 01439121 n 0000 #m 01440655 n 0000 | freshwater fish\n",
        "00060548 04 n 02 Hegira 1 Hejira 1 002 @i 00058743 n 0000 @ 00000009 n 0000 | the flight of Muhammad\n",
    ]
    assert parse_data_noun(lines) == {
        "n00001740": (),
        "n01440764": ("n01439121",),
        "n00060548": ("n00000009", "n00058743"),
    }
    with pytest.raises(BenchmarkError, match="line 1 is not a WordNet synset line"):
        parse_data_noun(["01440764 05 n zz tench\n"])


def test_table_bytes_are_canonical():
    assert dumps_table({"n2": ("n1",), "n1": ()}) == dumps_table({"n1": (), "n2": ("n1",)})


def test_real_graph_has_both_is_a_pointers(parents):
    assert len(parents) == 82115
    assert parents["n01440764"] == ("n01439121",)  # tench -> cyprinid (@)
    assert parents["n00060548"] == ("n00058743",)  # Hegira -> (instance of) flight (@i)
    assert parents["n00001740"] == ()  # entity, the root
    assert ancestor_distances(DALMATIAN, parents)[DOG] == 1
    with pytest.raises(BenchmarkError, match="n99999999 is not a WordNet 3.0 noun synset id"):
        ancestor_distances("n99999999", parents)


def test_relation_rules_on_a_small_graph():
    #      root
    #     /    \
    #    a      b        id classes: c, d
    #   / \     |
    #  c   x    d
    #  |        |
    #  e        f
    parents = {
        "root": (),
        "a": ("root",),
        "b": ("root",),
        "c": ("a",),
        "x": ("a",),
        "d": ("b",),
        "e": ("c",),
        "f": ("d",),
    }
    assert closest_relatives(["d", "c"], parents) == {"a": "c", "b": "d", "root": "c"}  # tie -> smallest id
    removals = relation_removals(["root", "a", "b", "c", "x", "e", "f"], ["c", "d"], parents)
    assert removals == {
        "root": ("hypernym", "c"),
        "a": ("hypernym", "c"),
        "b": ("hypernym", "d"),
        "c": ("id_class", "c"),
        "e": ("hyponym", "c"),
        "f": ("hyponym", "d"),
    }


def test_imagenet_pool_counts(pool_default, parents, id_classes):
    assert list(pool_default.columns) == COLUMNS
    assert len(pool_default) == 21843
    assert pool_default.id.is_unique
    counts = pool_default.rule.value_counts().to_dict()
    assert counts == {"hyponym": 1245, "id_class": 999, "hypernym": 761, "visually_ambiguous": 12}
    assert (pool_default.status == "ood").sum() == 18826
    assert (imagenet_ood_classes([]).status == "ood").sum() == 18838
    assert (imagenet_ood_classes(["biologically_distinct", "visually_ambiguous"]).status == "ood").sum() == 18812
    fall11 = imagenet_ood_classes(pool="imagenet22k")
    assert len(fall11) == 21841 and (fall11.status == "ood").sum() == 18824


def test_named_examples(pool_default, parents, id_classes):
    rows = pool_default.set_index("id")
    dog = rows.loc[DOG]
    assert (dog.status, dog.rule) == ("removed", "hypernym")
    assert dog.collides_with in id_classes and DOG in ancestor_distances(dog.collides_with, parents)
    cub = rows.loc[LION_CUB]
    assert (cub["name"], cub.status, cub.rule, cub.collides_with) == ("lion cub", "removed", "hyponym", LION)
    tench = rows.loc["n01440764"]
    assert (tench.rule, tench.collides_with) == ("id_class", "n01440764")
    avocado = rows.loc[AVOCADO]
    assert avocado.status == "ood" and pd.isna(avocado.rule) and pd.isna(avocado.collides_with)
    assert avocado.definition.startswith("a pear-shaped tropical fruit")
    cue = rows.loc[CUE_BALL]
    assert (cue.status, cue.rule, cue.collides_with) == ("removed", "visually_ambiguous", PING_PONG_BALL)
    assert rows.loc[VICEROY].status == "ood"  # biologically distinct: kept by default
    viceroy = imagenet_ood_classes(["biologically_distinct"]).set_index("id").loc[VICEROY]
    assert (viceroy.rule, viceroy.collides_with) == ("biologically_distinct", MONARCH)


def test_no_survivor_is_related_to_an_id_class_exhaustive(pool_default, parents, id_classes):
    @cache
    def closure(wnid: str) -> frozenset:  # an independent implementation: recursion, not BFS
        return frozenset(parents[wnid]).union(*(closure(p) for p in parents[wnid]))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    id_set = set(id_classes)
    above_id = frozenset().union(*(closure(i) for i in id_classes))
    survivors = pool_default[pool_default.status == "ood"].id
    for wnid in survivors:
        assert wnid not in id_set and wnid not in above_id and not (closure(wnid) & id_set), wnid
    removed = pool_default[pool_default.status == "removed"]
    for row in removed.itertuples():
        assert row.rule and row.collides_with in id_set, row
        if row.rule == "hypernym":
            assert row.id in closure(row.collides_with)
        elif row.rule == "hyponym":
            assert row.collides_with in closure(row.id)
        elif row.rule == "id_class":
            assert row.id == row.collides_with
    wordnet_related = {w for w in pool_default.id if w in id_set or w in above_id or closure(w) & id_set}
    assert wordnet_related == set(removed[removed.rule.isin(["id_class", "hypernym", "hyponym"])].id)


def test_rule_set_entries_are_wordnet_survivors(parents, id_classes):
    plain = classify_pool(read_synsets(POOLS["imagenet21k"]), id_classes, parents, []).set_index("id")
    assert DEFAULT_RULE_SETS == ("visually_ambiguous",)
    assert not RULE_SETS["biologically_distinct"].default_on
    listed = [e for s in RULE_SETS.values() for e in s.entries]
    assert len({e[0] for e in listed}) == len(listed)
    for wnid, id_class, why in listed:
        assert plain.loc[wnid].status == "ood" and id_class in id_classes and why, wnid


def test_rule_sets_bad_input_and_record():
    with pytest.raises(BenchmarkError, match="unknown rule set nope; known: visually_ambiguous, biologically_distinct"):
        imagenet_ood_classes(["nope"])
    with pytest.raises(BenchmarkError, match="unknown class pool 'imagenet1k'"):
        imagenet_ood_classes(pool="imagenet1k")
    with pytest.raises(BenchmarkError, match="lists a class twice"):
        classify_pool(["a", "a"], [], {"a": ()})
    record = rules_record(["biologically_distinct"])
    assert {n: r["enabled"] for n, r in record["rule_sets"].items()} == {
        "visually_ambiguous": False,
        "biologically_distinct": True,
    }
    assert record["rule_sets"]["visually_ambiguous"]["classes"][0] == CUE_BALL


def test_generate_cli_reports_a_missing_data_noun(tmp_path):
    import subprocess

    out = tmp_path / "t.gz"
    result = subprocess.run(
        [sys.executable, "-m", "dataset_builder.wordnet", "--data-noun", str(tmp_path / "nope"), "--table", str(out)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parents[1],
    )
    assert result.returncode == 1 and not out.exists()
    assert result.stderr.strip().splitlines()[-1].startswith("error: no WordNet data.noun at")
