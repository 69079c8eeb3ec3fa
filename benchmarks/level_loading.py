"""One severity level through ``datasets.load_dataset``, side by side in one run (figures, not a test).

A copy of the embedded glyph benchmark (built on first use) gets one reference level manifest
(seeded windows of 36 classes over the 400 OOD classes: which classes a level holds does not change what
loading costs), then level ``--level`` is loaded, each call with a fresh ``datasets`` cache, best of ``--repeats``
(after one untimed streaming read that warms the imports), timed until the call returns and until every row
(image decoded) has been read:

- whole config: ``load_dataset(folder, "<pair>", split="level_07")`` (prepares ``id_test`` and every level)
- level config: ``load_dataset(folder, "<pair>__level_07", split="level_07")`` (prepares that level alone)
- streaming:    ``load_dataset(folder, "<pair>", split="level_07", streaming=True)``, every row read
- load_level:   ``dataset_builder.loading.load_level(folder, model, kappa, 7)``

from the local folder and from a local stand-in of the Hub (``tests/hub_server.py``) it is published to.

    python benchmarks/level_loading.py [--level 7] [--repeats 2]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import hub_server  # noqa: E402  - before datasets and huggingface_hub are imported: they read HF_ENDPOINT once

HUB = hub_server.start_for_session()

import datasets  # noqa: E402
import numpy as np  # noqa: E402
from huggingface_hub import DatasetCard  # noqa: E402

from dataset_builder.benchmark import Benchmark  # noqa: E402
from dataset_builder.card import add_levels  # noqa: E402
from dataset_builder.embedded import embedded_benchmark  # noqa: E402
from dataset_builder.levels import level_split, level_table  # noqa: E402
from dataset_builder.loading import load_level  # noqa: E402
from dataset_builder.publish import publish  # noqa: E402

MODEL, KAPPA, LEVELS, REPO = "glyph_cnn", "softmax", 11, "cood/level-loading"
PAIR = f"{MODEL}__{KAPPA}"


def with_levels(source: Path, folder: Path) -> Path:
    """A copy of the benchmark with a reference level manifest of seeded windows (the severity rule's starts)."""
    root = folder / "glyphs"
    shutil.copytree(source, root)
    bench = Benchmark.open(root)
    ids, width = bench.ood_classes["id"].tolist(), len(bench.id_classes)
    order = np.random.default_rng(0).permutation(len(ids))
    scores = np.empty(len(ids))
    scores[order] = np.arange(len(ids)) / len(ids)
    n = len(ids) - width + 1
    starts = [(level * n) // (LEVELS - 1) for level in range(LEVELS - 1)] + [n - 1]
    table = level_table([order[s:s + width].tolist() for s in starts], scores.tolist(), [float(scores[order[s]]) for s in starts],
                        [level / (LEVELS - 1) for level in range(LEVELS)], ids)
    table.to_parquet(folder / "levels.parquet")
    add_levels(root, folder / "levels.parquet", MODEL, KAPPA)
    return root


def seconds(call) -> tuple[float, float, int]:
    """Wall seconds until ``call()`` returns and until every row of what it returned is read; the number of rows."""
    start = time.perf_counter()
    ds = call()
    returned = time.perf_counter() - start
    rows = sum(1 for _ in ds)
    return returned, time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    split = level_split(args.level)
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory(prefix="cood-level-loading-") as tmp:
        tmp = Path(tmp)
        root = with_levels(embedded_benchmark("glyphs", progress=False), tmp)
        publish(root, REPO, tag="1.0.0", endpoint=HUB.url)
        card = (root / "README.md").read_text()
        start = time.perf_counter()
        DatasetCard(card)
        parse = time.perf_counter() - start
        print(f"card: {len(card.splitlines())} lines, {len(DatasetCard(card).data.configs)} configs, YAML parsed in {parse:.2f} s")
        caches = iter(range(1000))

        def fresh() -> str:
            return str(tmp / f"cache-{next(caches)}")

        sum(1 for _ in datasets.load_dataset(str(root), PAIR, split=level_split(0), streaming=True))  # warm-up
        print(f"\nlevel {args.level} of {PAIR}       returned s  all rows read s  rows")
        for where, source, rev in (("folder", str(root), {}), ("hub", REPO, {"revision": "1.0.0"})):
            calls = {
                "whole config": lambda: datasets.load_dataset(source, PAIR, split=split, cache_dir=fresh(), **rev),
                "level config": lambda: datasets.load_dataset(source, f"{PAIR}__{split}", split=split, cache_dir=fresh(), **rev),
                "streaming": lambda: datasets.load_dataset(source, PAIR, split=split, streaming=True, **rev),
                "load_level": lambda: load_level(source, MODEL, KAPPA, args.level, cache_dir=fresh(), **rev),
            }
            for name, call in calls.items():
                returned, read, rows = min(seconds(call) for _ in range(args.repeats))
                print(f"  {where:6} {name:14} {returned:10.2f}  {read:15.2f}  {rows}")


if __name__ == "__main__":
    main()
