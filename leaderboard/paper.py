"""Import of the paper's published per-level table (Galil, Dabbah & El-Yaniv, ICLR 2023) as records.

The authors' CSV has one row per (model, kappa, severity level) with ood-auroc, ood_avg_conf,
id-acc, id-auroc and id_avg_conf. Each (model, kappa) becomes one record with provenance
``"paper"`` on the paper's own benchmark identity; entries are identified by model name. The table lists some
models twice under two names (``vgg13`` and ``vgg13_torchvision``): their rows agree on every kappa and level both
have (:func:`alias_groups`), so each becomes one model, its other names kept as aliases. The package ships the table
(``data/all_paper_results.csv.gz``, the authors' MIT licence in ``data/PAPER_RESULTS_LICENSE.txt``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from leaderboard.errors import LeaderboardError
from leaderboard.record import make_record

BENCHMARK = {
    "id": "imagenet-cood-paper2023",
    "version": "iclr2023",
    "manifest_sha256": None,
    "num_id_classes": 1000,
    "num_ood_classes": None,
}
NUM_ID_IMAGES = 50_000  # ImageNet-1K validation set
KAPPAS = {
    "softmax": ("softmax", {}),
    "entropy": ("entropy", {}),
    "max_logit": ("max_logit", {}),
    "odin_temperature-2_noise_mag-1e-05": ("odin", {"temperature": 2, "epsilon": 1e-05}),
    "mcd_entropy": ("mc_dropout", {}),
}
SOURCE = "Galil, Dabbah & El-Yaniv, ICLR 2023 (arXiv 2302.11893): all_paper_results.csv"
DEFINITIONS = {
    "ood_auroc": "AUROC of kappa separating ImageNet-1K validation images (positive) from the level's OOD "
    "test images, as published by the paper (ties ordered by an unseeded shuffle)",
    "id_auroc": "AUROC of kappa separating correctly from wrongly classified ID images, as published",
}
COLUMNS = [
    "severity level",
    "percentile",
    "ood-auroc",
    "ood_avg_conf",
    "id-acc",
    "id-auroc",
    "id_avg_conf",
    "model name",
    "confidence function",
]
# two names of one model: every ood-auroc, id-acc and id-auroc of the kappas and levels both have agree to this (the
# table's re-evaluations of one set of weights differ by at most 1e-4, two different models by 1.2e-3 or more); the
# average confidences are left out, as a max logit's is not on a [0, 1] scale
ALIAS_COLUMNS = ["ood-auroc", "id-acc", "id-auroc"]
ALIAS_TOLERANCE = 2e-4

PAPER_TABLE = Path(__file__).with_name("data") / "all_paper_results.csv.gz"  # MIT, see data/PAPER_RESULTS_LICENSE.txt


def read_paper_table(path: str | Path = PAPER_TABLE) -> pd.DataFrame:
    """The authors' CSV (default: the copy shipped with the package), checked for its columns and kappa names."""
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise LeaderboardError(f"cannot read {path}: {exc}") from exc
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise LeaderboardError(f"{path}: not the paper's table, missing column '{missing[0]}'")
    unknown = sorted(set(table["confidence function"]) - set(KAPPAS))
    if unknown:
        raise LeaderboardError(f"{path}: unknown confidence function {unknown[0]!r}; known: {', '.join(KAPPAS)}")
    return table


def alias_pairs(table: pd.DataFrame) -> list[tuple[str, str]]:
    """The pairs of model names (each in name order, pairs sorted) whose rows agree to :data:`ALIAS_TOLERANCE` on
    every :data:`ALIAS_COLUMNS` value of every (kappa, level) both have, sharing at least one kappa."""
    wide = table.pivot_table(
        index="model name", columns=["confidence function", "severity level"], values=ALIAS_COLUMNS, sort=True
    )
    values, names = wide.to_numpy(dtype="float64"), wide.index.tolist()
    pairs = []
    for i in range(len(names) - 1):
        gap = np.abs(values[i + 1 :] - values[i])
        shared = ~np.isnan(gap)
        same = np.where(shared, gap <= ALIAS_TOLERANCE, True).all(axis=1) & shared.any(axis=1)
        pairs += [(names[i], names[i + 1 + j]) for j in np.flatnonzero(same)]
    return sorted(pairs)


def _name_order(name: str) -> tuple[int, str]:
    """The name a model goes by among its aliases: the shortest (``vgg13`` before ``vgg13_torchvision``), then the
    first in order."""
    return len(name), name


def alias_groups(table: pd.DataFrame) -> dict[str, list[str]]:
    """Each model the table lists under more than one name (:func:`alias_pairs`, joined where they chain): the name
    it goes by (:func:`_name_order`) -> its other names, in name order."""
    root: dict[str, str] = {}

    def find(name: str) -> str:
        while root.get(name, name) != name:
            name = root[name]
        return name

    for a, b in alias_pairs(table):
        first, second = sorted((find(a), find(b)), key=_name_order)
        root[first], root[second] = first, first
    groups: dict[str, list[str]] = {}
    for name in sorted(root):
        if find(name) != name:
            groups.setdefault(find(name), []).append(name)
    return dict(sorted(groups.items()))


def merge_aliases(table: pd.DataFrame, groups: dict[str, list[str]]) -> pd.DataFrame:
    """The table with every alias's rows under the name its model goes by; of a kappa several names have, the rows of
    the first name in :func:`_name_order` are kept."""
    goes_by = {alias: model for model, aliases in groups.items() for alias in aliases}
    names = table["model name"]
    merged = table.assign(**{"model name": names.map(lambda n: goes_by.get(n, n))})
    order = names.map({name: i for i, name in enumerate(sorted(set(names), key=_name_order))})
    first = order.groupby([merged["model name"], merged["confidence function"]]).transform("min")
    return merged[order == first]


def paper_records(table: pd.DataFrame) -> list[dict]:
    """One record per (model, kappa) of the paper's table, levels in order; a model the table lists under several
    names once (:func:`alias_groups`), its other names in ``model.aliases``."""
    groups = alias_groups(table)
    table = merge_aliases(table, groups).sort_values(
        ["model name", "confidence function", "severity level"], kind="stable"
    )
    columns = {c: table[c].tolist() for c in COLUMNS}
    records = []
    for (model, kappa), index in table.groupby(["model name", "confidence function"], sort=False).indices.items():
        rows = [{c: columns[c][i] for c in COLUMNS} for i in index]
        name, params = KAPPAS[kappa]
        levels = [_level(row) for row in rows]
        first = rows[0]
        records.append(
            make_record(
                provenance="paper",
                benchmark=BENCHMARK,
                model={"name": model, "source": SOURCE, "preprocessing": {}, "aliases": groups.get(model)},
                kappa={"name": name, "params": params},
                levels=levels,
                id={
                    "acc": first["id-acc"],
                    "auroc": first["id-auroc"],
                    "avg_conf": first["id_avg_conf"],
                    "num": NUM_ID_IMAGES,
                },
                summary={"mean_ood_auroc": math.fsum(level["ood_auroc"] for level in levels) / len(levels)},
                metric_definitions=DEFINITIONS,
            )
        )
    return records


def _level(row: dict) -> dict:
    """A level as the paper reports it; what it does not report (the level score, fpr@95, AUPRs, counts) is null."""
    return {
        "level": row["severity level"],
        "percentile": row["percentile"],
        "ood_auroc": row["ood-auroc"],
        "ood_avg_conf": row["ood_avg_conf"],
    }
