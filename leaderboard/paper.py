"""Import of the paper's published per-level table (Galil, Dabbah & El-Yaniv, ICLR 2023) as records.

The authors' CSV has one row per (model, kappa, severity level) with ood-auroc, ood_avg_conf,
id-acc, id-auroc and id_avg_conf. Each (model, kappa) becomes one record with provenance
``"paper"`` on the paper's own benchmark identity; entries are identified by model name. The package ships the
table (``data/all_paper_results.csv.gz``, the authors' MIT licence in ``data/PAPER_RESULTS_LICENSE.txt``).
"""

from __future__ import annotations

import math
from pathlib import Path

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


def paper_records(table: pd.DataFrame) -> list[dict]:
    """One record per (model, kappa) of the paper's table, levels in order."""
    table = table.sort_values(["model name", "confidence function", "severity level"], kind="stable")
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
                model={"name": model, "source": SOURCE, "preprocessing": {}},
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
