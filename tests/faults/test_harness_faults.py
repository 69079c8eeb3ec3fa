"""When anything goes wrong the harness says so in one line and loses nothing: a damaged score cache heals, an
unwritable one is read and skipped, impossible options and bad model names are refused before any image is read,
and an earlier run's outputs and the cache stay as they were (hash trees before and after)."""

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dataset_builder.levels import level_file_name
from glyph_fixtures import CNN, cnn_variant
from harness.runtime.score_cache import decode, encode
from leaderboard.store import first_difference

pytestmark = pytest.mark.slow  # real runs: the quick loop (-m 'not slow') leaves them to CI

# a resumed run scores its last shards in other batches: its metrics agree with a clean run's to float rounding
STABLE_EXCEPT = ("created", "timings", "order_seed")


def cli(*args, cwd=None, wrap=()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*wrap, sys.executable, "-m", "harness.cli", "submit", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by relative path, with its sha256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def records(out: Path) -> dict:
    return {
        p.stem: {k: v for k, v in json.loads(p.read_text()).items() if k not in STABLE_EXCEPT}
        for p in sorted((out / "records").glob("*.json"))
    }


def timings(out: Path) -> dict:
    return json.loads((out / "records" / "softmax.json").read_text())["timings"]


def one_line(stderr: str, pattern: str) -> None:
    assert len(stderr.splitlines()) == 1 and re.fullmatch(pattern, stderr.strip()), stderr


def entries(cache: Path, split: str) -> list[Path]:
    return sorted(cache.glob(f"*/{split}/*.scores"))


@pytest.fixture(scope="module")
def common(tiny_glyphs) -> list:
    return [CNN, "--benchmark", tiny_glyphs, "--quiet", "-k", "softmax"]


@pytest.fixture(scope="module")
def clean(common, tmp_path_factory):
    """One clean run with a fresh cache: its outputs, cache, records and number of shards."""
    base = tmp_path_factory.mktemp("clean")
    done = cli(*common, "--workers", "0", "--out", base / "out", "--cache-dir", base / "cache")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    shards = len(list((base / "cache").rglob("*.scores")))
    assert (
        shards == timings(base / "out")["shards_scored"] == 1 + 1 + 48
    )  # ID test, OOD estimation, one OOD test shard per class
    return {"out": base / "out", "cache": base / "cache", "records": records(base / "out"), "shards": shards}


@pytest.fixture
def earlier(clean, tmp_path):
    """A copy of the clean run's outputs and cache, with their hash trees."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    shutil.copytree(clean["out"], out)
    shutil.copytree(clean["cache"], cache)
    return {"out": out, "cache": cache, "out_tree": tree(out), "cache_tree": tree(cache)}


def assert_outputs_moved_aside(earlier) -> None:
    """The new run's outputs replaced the earlier ones, which were moved aside whole."""
    (previous,) = earlier["out"].parent.glob("out.previous-*")
    assert tree(previous) == earlier["out_tree"]
    assert not list(earlier["out"].parent.glob(".out.partial-*"))


def assert_untouched(earlier) -> None:
    assert tree(earlier["out"]) == earlier["out_tree"] and tree(earlier["cache"]) == earlier["cache_tree"]
    assert sorted(p.name for p in earlier["out"].parent.iterdir()) == ["cache", "out"]


def healing_run(common, clean, earlier, entry: Path, reason: str) -> None:
    """Rerun over a cache whose ``entry`` was damaged: one warning, the entry scored again and rewritten whole, the
    records of the clean run, every other cache file as it was."""
    done = cli(*common, "--workers", "0", "--out", earlier["out"], "--cache-dir", earlier["cache"])
    assert done.returncode == 0, done.stderr
    one_line(
        done.stderr,
        rf"warning: score cache entry {re.escape(str(entry))} is unusable \({reason}\); "
        r"it is discarded and its shard scored again",
    )
    assert first_difference(records(earlier["out"]), clean["records"]) is None
    stats = timings(earlier["out"])
    assert stats["shards_scored"] == 1 and stats["shards_from_cache"] == clean["shards"] - 1
    assert_outputs_moved_aside(earlier)
    name = str(entry.relative_to(earlier["cache"]))
    after = tree(earlier["cache"])
    assert {k: v for k, v in after.items() if k != name} == {
        k: v for k, v in earlier["cache_tree"].items() if k != name
    }
    healed, original = decode(entry.read_bytes()), decode((clean["cache"] / name).read_bytes())
    assert sorted(healed) == sorted(original) and healed["keys"].tolist() == original["keys"].tolist()


def test_a_truncated_cache_entry_is_recomputed(common, clean, earlier):
    entry = entries(earlier["cache"], "ood_estimation")[0]
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])
    healing_run(common, clean, earlier, entry, rf"its checksum does not match its {len(data) // 2} bytes")


def test_a_cache_entry_of_garbage_bytes_is_recomputed(common, clean, earlier):
    entry = entries(earlier["cache"], "id_test")[0]
    entry.write_bytes(bytes(range(256)) * 8)
    healing_run(common, clean, earlier, entry, "its checksum does not match its 2048 bytes")


def test_a_cache_entry_of_another_shard_is_recomputed(common, clean, earlier):
    entry, stranger = (
        entries(earlier["cache"], "ood_test")[3],
        entries(earlier["cache"], "ood_test")[5],
    )  # 8 samples each
    shutil.copyfile(stranger, entry)
    shard = str(decode(stranger.read_bytes())["shard"])
    assert shard.startswith("ood_test/ood/test/")
    healing_run(common, clean, earlier, entry, f"it holds the scores of {re.escape(shard)}")


def test_a_cache_entry_with_a_sample_missing_is_recomputed(common, clean, earlier):
    entry = entries(earlier["cache"], "ood_test")[7]
    arrays = decode(entry.read_bytes())
    entry.write_bytes(encode({k: (v if v.ndim == 0 else v[1:]) for k, v in arrays.items()}))  # a valid checksum
    assert len(arrays["keys"]) == 8
    healing_run(common, clean, earlier, entry, "it holds 7 samples, the manifest lists 8")


def test_a_cache_under_a_regular_file_is_skipped_and_the_run_completes(common, clean, earlier, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder\n")
    done = cli(*common, "--workers", "0", "--out", earlier["out"], "--cache-dir", blocker / "cache")
    assert done.returncode == 0, done.stderr
    one_line(
        done.stderr,
        rf"warning: cannot write the score cache in {re.escape(str(blocker / 'cache'))}/\w+ "
        r"\(Not a directory\); the run goes on without caching",
    )
    assert (
        first_difference(records(earlier["out"]), clean["records"]) is None
        and timings(earlier["out"])["shards_scored"] == clean["shards"]
    )
    assert blocker.read_text() == "not a folder\n"
    assert_outputs_moved_aside(earlier)


def _read_only_mounts() -> bool:
    probe = (
        subprocess.run(
            ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && ! touch "$0/x"', "/tmp"],
            capture_output=True,
        )
        if shutil.which("unshare")
        else None
    )
    return probe is not None and probe.returncode == 0


@pytest.mark.skipif(not _read_only_mounts(), reason="needs unshare and read-only bind mounts")
def test_a_read_only_cache_is_still_read(common, clean, earlier):
    entry = entries(earlier["cache"], "ood_test")[0]
    entry.unlink()  # one shard to score, whose entry cannot be written
    before = tree(earlier["cache"])
    read_only = ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', earlier["cache"]]
    done = cli(*common, "--workers", "0", "--out", earlier["out"], "--cache-dir", earlier["cache"], wrap=read_only)
    assert done.returncode == 0, done.stderr
    one_line(
        done.stderr,
        rf"warning: cannot write the score cache in {re.escape(str(earlier['cache']))}/\w+ "
        r"\(Read-only file system\); the run goes on without caching",
    )
    stats = timings(earlier["out"])
    assert stats["shards_from_cache"] == clean["shards"] - 1 and stats["shards_scored"] == 1
    assert first_difference(records(earlier["out"]), clean["records"]) is None and tree(earlier["cache"]) == before
    assert_outputs_moved_aside(earlier)


def test_options_at_their_limits_are_accepted(common, clean, earlier):
    name = "é" * 100  # 200 UTF-8 bytes
    done = cli(
        *common,
        "--workers",
        "0",
        "--out",
        earlier["out"],
        "--cache-dir",
        earlier["cache"],
        "--levels",
        "13",
        "--name",
        name,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    (record,) = records(earlier["out"]).values()
    assert record["model"]["name"] == name and record["num_levels"] == 13 and len(record["levels"]) == 13
    assert timings(earlier["out"])["shards_from_cache"] == clean["shards"]
    levels = pd.read_parquet(earlier["out"] / "levels" / level_file_name(name, "softmax"))
    assert levels.groupby("level")["class_id"].apply(frozenset).nunique() == 13  # 13 distinct windows
    assert tree(earlier["cache"]) == earlier["cache_tree"]
    assert_outputs_moved_aside(earlier)


OPTION_FAULTS = {
    "levels_beyond_the_windows": (
        ["--levels", "14"],
        r"error: --levels 14 is more than the benchmark \S+ allows: its 48 OOD "
        r"classes in windows of 36 \(its ID classes\) give 13 distinct levels at most",
    ),
    "one_level": (
        ["--levels", "1"],
        r"error: --levels must be at least 2 \(the method needs a first and a last level\), got 1",
    ),
    "negative_workers": (["--workers", "-1"], r"error: --workers must be 0 or more, got -1"),
    "empty_batches": (["--batch-size", "0"], r"error: --batch-size must be at least 1, got 0"),
    "no_mc_passes": (["-k", "mc_dropout", "--mc-passes", "0"], r"error: --mc-passes must be at least 1, got 0"),
    "mc_passes_without_mc_dropout": (
        ["--mc-passes", "5"],
        r"error: --mc-passes applies to the mc_dropout kappa, which is not requested \(-k mc_dropout\)",
    ),
    "odin_preset_without_odin": (
        ["-k", "mc_dropout", "--odin-preset", "original"],
        r"error: --odin-preset applies to the odin kappa, which is not requested \(-k odin\)",
    ),
    "unknown_odin_preset": (
        ["-k", "odin", "--odin-preset", "fast"],
        r"error: --odin-preset 'fast' is unknown; known: paper, original",
    ),
}


@pytest.mark.parametrize("fault", sorted(OPTION_FAULTS))
def test_an_impossible_option_is_refused_in_one_line(common, earlier, fault):
    options, message = OPTION_FAULTS[fault]
    done = cli(*common, "--out", earlier["out"], "--cache-dir", earlier["cache"], *options)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    one_line(done.stderr, message)
    assert_untouched(earlier)


BAD_NAMES = {
    "empty": ("", r"the model name '' is not a name"),
    "dot": (".", r"the model name '\.' is not a name"),
    "dot_dot": ("..", r"the model name '\.\.' is not a name"),
    "slash": ("a/b", r"the model name 'a/b' contains '/' or '\\'"),
    "backslash": ("a\\b", r"the model name 'a\\\\b' contains '/' or '\\'"),
    "tab": ("one\ttwo", r"the model name 'one\\ttwo' contains a control character"),
    "line_separator": ("one\u2028two", r"the model name 'one\\u2028two' contains a control character"),
    "too_long": ("é" * 101, r"the model name 'é{60}\.\.\.' is 202 UTF-8 bytes long, more than 200"),
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_a_bad_name_is_refused_in_one_line(common, earlier, case):
    name, message = BAD_NAMES[case]
    done = cli(*common, "--out", earlier["out"], "--cache-dir", earlier["cache"], "--name", name)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    one_line(done.stderr, "error: " + message)
    assert_untouched(earlier)


@pytest.mark.parametrize("trusted", [False, True], ids=["sandboxed", "trusted"])
def test_a_files_bad_name_is_refused_and_writes_nothing(tiny_glyphs, clean, tmp_path, trusted):
    (tmp_path / "file").mkdir()
    path = cnn_variant(tmp_path / "file" / "escape.py", "NAME = '../escape'\nbuild_model = cnn.build_model\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cache = tmp_path / "cache"
    shutil.copytree(clean["cache"], cache)
    before = tree(cache)
    done = cli(
        path,
        "--benchmark",
        tiny_glyphs,
        "--quiet",
        "-k",
        "softmax",
        "--cache-dir",
        cache,
        *(["--trust-submission"] if trusted else []),
        cwd=cwd,
    )  # the default --out would be cood-results/NAME
    assert done.returncode == 2 and done.stdout == "", done.stdout
    one_line(done.stderr, r"error: the model name '\.\./escape' contains '/' or '\\'")
    assert list(cwd.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["cache", "cwd", "file"]
    assert tree(cache) == before


def test_a_run_into_another_models_out_leaves_only_the_new_set(tiny_glyphs, earlier):
    mlp = Path(CNN).with_name("glyph_mlp.py")
    done = cli(
        mlp,
        "--benchmark",
        tiny_glyphs,
        "--quiet",
        "-k",
        "softmax",
        "-k",
        "margin",
        "--workers",
        "0",
        "--out",
        earlier["out"],
        "--no-cache",
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"moved the earlier outputs in .*out to .*out\.previous-", done.stdout), done.stdout
    new = tree(earlier["out"])
    assert sorted(p for p in new if not p.startswith("per_class/thumbnails/")) == [
        "levels/glyph_mlp__margin.parquet",
        "levels/glyph_mlp__softmax.parquet",
        "per_class/per_class.parquet",
        "per_image/margin.parquet",
        "per_image/softmax.parquet",
        "per_level.csv",
        "records/margin.json",
        "records/softmax.json",
        "severity_curves.png",
    ]
    assert {r["model"]["name"] for r in records(earlier["out"]).values()} == {"glyph_mlp"}
    assert set(pd.read_parquet(earlier["out"] / "per_class" / "per_class.parquet")["kappa"]) == {"softmax", "margin"}
    assert set(pd.read_csv(earlier["out"] / "per_level.csv")["model name"]) == {"glyph_mlp"}
    assert_outputs_moved_aside(earlier)
