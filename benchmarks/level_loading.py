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

Every load parses the card's YAML, where each config declares the sample features (the same in every config);
the last lines print its size and parse time for the glyph card and for an ImageNet-shaped benchmark (1,000 ID
and 10,450 OOD classes, one reference pair; manifest and class tables only), as written and without the per-level
configs.

    python benchmarks/level_loading.py [--level 7] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import hub_server

HUB = hub_server.start_for_session()

import datasets  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from dataset_builder.benchmark import Benchmark  # noqa: E402
from dataset_builder.card import add_levels, card_text  # noqa: E402
from dataset_builder.embedded import embedded_benchmark  # noqa: E402
from dataset_builder.levels import level_split, level_table  # noqa: E402
from dataset_builder.loading import load_level  # noqa: E402
from dataset_builder.manifest import FORMAT_VERSION, MANIFEST  # noqa: E402
from dataset_builder.publish import publish  # noqa: E402

MODEL, KAPPA, LEVELS, REPO = "glyph_cnn", "softmax", 11, "cood/level-loading"
PAIR = f"{MODEL}__{KAPPA}"


def seeded_levels(ood_ids: list[str], width: int, folder: Path) -> Path:
    """A level manifest of seeded windows of ``width`` classes (the severity rule's starts), written into ``folder``."""
    order = np.random.default_rng(0).permutation(len(ood_ids))
    scores = np.empty(len(ood_ids))
    scores[order] = np.arange(len(ood_ids)) / len(ood_ids)
    n = len(ood_ids) - width + 1
    starts = [(level * n) // (LEVELS - 1) for level in range(LEVELS - 1)] + [n - 1]
    table = level_table(
        [order[s : s + width].tolist() for s in starts],
        scores.tolist(),
        [float(scores[order[s]]) for s in starts],
        [level / (LEVELS - 1) for level in range(LEVELS)],
        ood_ids,
    )
    table.to_parquet(folder / "levels.parquet")
    return folder / "levels.parquet"


def with_levels(source: Path, folder: Path) -> Path:
    """A copy of the benchmark with a reference level manifest."""
    root = folder / "glyphs"
    shutil.copytree(source, root)
    bench = Benchmark.open(root)
    add_levels(root, seeded_levels(bench.ood_classes["id"].tolist(), len(bench.id_classes), folder), MODEL, KAPPA)
    return root


def imagenet_shaped(folder: Path, num_id: int = 1000, num_ood: int = 10450) -> Path:
    """A folder with the manifest and class tables of an ImageNet-sized benchmark (no shards) and one reference pair."""
    root = folder / "imagenet-shaped"
    (root / "classes").mkdir(parents=True)
    id_ids, ood_ids = [f"n{i:08d}" for i in range(num_id)], [f"n{i:08d}" for i in range(num_id, num_id + num_ood)]
    shards = [{"path": f"id/test/{i:05d}.tar", "split": "id_test"} for i in range(50)]
    shards += [
        {"path": f"ood/test/{i // 1000:03d}/{c}.tar", "split": "ood_test", "class_id": c} for i, c in enumerate(ood_ids)
    ]
    manifest = {
        "format_version": FORMAT_VERSION,
        "image_ext": "jpg",
        "shards": shards,
        "source": {"kind": "imagenet"},
        "benchmark": {"id": "imagenet-shaped", "version": "1.0.0", "description": "shape only"},
        "classes": {"id": num_id, "ood": num_ood},
    }
    (root / MANIFEST).write_text(json.dumps(manifest))
    ood = {
        "id": ood_ids,
        "name": ood_ids,
        "status": "ood",
        "index": range(num_ood),
        "label": range(num_id, num_id + num_ood),
    }
    pd.DataFrame({"index": range(num_id), "id": id_ids, "name": id_ids, "label": range(num_id)}).to_parquet(
        root / "classes" / "id.parquet"
    )
    pd.DataFrame(ood).to_parquet(root / "classes" / "ood.parquet")
    add_levels(root, seeded_levels(ood_ids, num_id, folder), MODEL, KAPPA)
    return root


def card_yaml(meta: dict, per_level: bool) -> str:
    """The card's YAML, without the per-level configs when asked."""
    keep = [c["config_name"] for c in meta["configs"] if per_level or "__level_" not in c["config_name"]]
    meta = {
        **meta,
        "configs": [c for c in meta["configs"] if c["config_name"] in keep],
        "dataset_info": [i for i in meta["dataset_info"] if i["config_name"] in keep],
    }
    return yaml.dump(meta, sort_keys=False, allow_unicode=True)


def yaml_figures(root: Path) -> None:
    meta = yaml.safe_load(card_text(root).split("---\n")[1])
    print(f"\ncard YAML, {root.name}          lines  parse s")
    for name, per_level in (("as written", True), ("no per-level configs", False)):
        text = card_yaml(meta, per_level)
        start = time.perf_counter()
        yaml.safe_load(text)
        print(f"  {name:22} {len(text.splitlines()):9,}  {time.perf_counter() - start:7.2f}")


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
        caches = iter(range(1000))

        def fresh() -> str:
            return str(tmp / f"cache-{next(caches)}")

        sum(1 for _ in datasets.load_dataset(str(root), PAIR, split=level_split(0), streaming=True))  # warm-up
        print(f"\nlevel {args.level} of {PAIR}       returned s  all rows read s  rows")
        for where, source, rev in (("folder", str(root), {}), ("hub", REPO, {"revision": "1.0.0"})):
            bound = {"source": source, "rev": rev}  # each call gets a fresh cache: built when called, not here
            calls = {
                "whole config": lambda source, rev: datasets.load_dataset(
                    source, PAIR, split=split, cache_dir=fresh(), **rev
                ),
                "level config": lambda source, rev: datasets.load_dataset(
                    source, f"{PAIR}__{split}", split=split, cache_dir=fresh(), **rev
                ),
                "streaming": lambda source, rev: datasets.load_dataset(
                    source, PAIR, split=split, streaming=True, **rev
                ),
                "load_level": lambda source, rev: load_level(
                    source, MODEL, KAPPA, args.level, cache_dir=fresh(), **rev
                ),
            }
            for name, call in calls.items():
                returned, read, rows = min(
                    (seconds(partial(call, **bound)) for _ in range(args.repeats)), key=lambda t: t[1]
                )
                print(f"  {where:6} {name:14} {returned:10.2f}  {read:15.2f}  {rows}")
        yaml_figures(root)
        yaml_figures(imagenet_shaped(tmp))


if __name__ == "__main__":
    main()
