"""A board whose records keep per-image score files (as a harness run writes them), for the paired tests: five
entries of two models on one benchmark, their numbers computed from their files; one more without a file."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.method.intervals import accuracy_interval, auroc_interval, mean_auroc_interval
from lb_records import STATEMENT, record
from leaderboard.per_image import SCHEMA
from leaderboard.store import add_records

NUM_LEVELS = 3
M_ID, CLASSES, PER_CLASS = 300, 12, 20
# (model, kappa, the score's shift for right ID predictions, noise of its own): softmax and energy of one model share
# its image effect and nearly all their noise, so their close means are told apart by the paired test only;
# its max_logit, with more noise of its own, is not told apart from its softmax
ENTRIES = (
    ("glyph_cnn", "softmax", 1.6, 0.05),
    ("glyph_cnn", "energy", 1.55, 0.05),
    ("glyph_cnn", "max_logit", 1.6, 0.2),
    ("glyph_cnn", "entropy", 1.2, 0.6),
    ("glyph_mlp", "softmax", 0.6, 0.3),
)


def scores(rng: np.random.Generator) -> dict[tuple[str, str], dict]:
    """Each entry's per-image columns: ID test rows (correctness from the model), then OOD test rows, each OOD class
    in one level of the entry's own (classes by their mean score, hardest last, 4 a level)."""
    image = rng.normal(0.0, 1.0, M_ID + CLASSES * PER_CLASS)
    cls = np.repeat(np.arange(CLASSES), PER_CLASS)
    delta = np.linspace(0.5, 3.0, CLASSES)
    right = {"glyph_cnn": rng.random(M_ID) < 0.9, "glyph_mlp": rng.random(M_ID) < 0.6}
    common = rng.normal(0.0, 0.5, len(image))
    out = {}
    for model, kappa, shift, own in ENTRIES:
        noise = common + rng.normal(0.0, own, len(image))
        ids = 2.0 + shift * right[model] + image[:M_ID] + noise[:M_ID]
        oods = delta[cls] + image[M_ID:] + noise[M_ID:]
        order = np.argsort([-oods[cls == c].mean() for c in range(CLASSES)], kind="stable")
        level_of = np.empty(CLASSES, np.int64)
        level_of[order] = np.arange(CLASSES) * NUM_LEVELS // CLASSES
        level_of = NUM_LEVELS - 1 - level_of  # level 0: the easiest classes
        out[(model, kappa)] = {
            "key": [f"id{i:04d}" for i in range(M_ID)] + [f"ood{j:04d}" for j in range(len(cls))],
            "split": ["id_test"] * M_ID + ["ood_test"] * len(cls),
            "class_id": [f"c{i % 7}" for i in range(M_ID)] + [f"o{c:02d}" for c in cls],
            "score": np.r_[ids, oods],
            "correct": [bool(c) for c in right[model]] + [None] * len(cls),
            "levels": [[] for _ in range(M_ID)] + [[int(level_of[c])] for c in cls],
        }
    return out


def parquet(columns: dict) -> bytes:
    n = len(columns["key"])
    table = pa.table(
        {
            **{k: columns[k] for k in ("key", "split", "class_id")},
            "score": pa.array(columns["score"], pa.float64()),
            "value": pa.array(columns["score"], pa.float64()),
            "correct": pa.array(columns["correct"], pa.bool_()),
            "levels": pa.array(columns["levels"], pa.list_(pa.int16())),
            "nll": pa.nulls(n, pa.float64()),
            "brier": pa.nulls(n, pa.float64()),
        },
        schema=SCHEMA,
    )
    buffer = io.BytesIO()
    pq.write_table(table.sort_by([("split", "ascending"), ("key", "ascending")]), buffer)
    return buffer.getvalue()


def entry_record(model: str, kappa: str, columns: dict, run: Path) -> dict:
    """A record whose level ood-aurocs, id-acc and id-auroc are its per-image file's, the file written under ``run``."""
    split, score = np.asarray(columns["split"]), np.asarray(columns["score"])
    right = np.array([bool(c) for c, s in zip(columns["correct"], split) if s == "id_test"])
    ids, oods = score[split == "id_test"], score[split == "ood_test"]
    ood_levels = [v[0] for v, s in zip(columns["levels"], split) if s == "ood_test"]
    by_level = [np.flatnonzero(np.asarray(ood_levels) == level) for level in range(NUM_LEVELS)]
    level_ci = [auroc_interval(ids, oods[rows]) for rows in by_level]
    weights = "44" * 32 if model == "glyph_cnn" else "77" * 32
    rec = record(
        model=model, weights=weights, kappa=kappa, aurocs=[c.estimate for c in level_ci], num_levels=NUM_LEVELS
    )
    for level, ci in zip(rec["levels"], level_ci):
        level["ood_auroc_low"], level["ood_auroc_high"] = ci.low, ci.high
    parts = (
        (rec["summary"], "mean_ood_auroc", mean_auroc_interval(ids, oods, by_level)),
        (rec["id"], "acc", accuracy_interval(int(right.sum()), len(right))),
        (rec["id"], "auroc", auroc_interval(ids[right], ids[~right])),
    )
    for part, name, ci in parts:
        part[name], part[f"{name}_low"], part[f"{name}_high"] = ci.estimate, ci.low, ci.high
    rec["intervals"] = {**STATEMENT, "methods": {k: "binormal-score-adapted" for k in STATEMENT["methods"]}}
    data = parquet(columns)
    name = f"per_image/{model}-{kappa}.parquet"
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    (run / name).write_bytes(data)
    rec["per_image"] = {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "rows": len(columns["key"])}
    return rec


def paired_board(tmp_path: Path, seed: int = 0) -> Path:
    """The board of :data:`ENTRIES` (with per-image files) and one more entry without a file (``glyph_mlp``'s
    ``max_logit``, as a record made before the files)."""
    run = tmp_path / "run"
    tables = scores(np.random.default_rng(seed))
    records = [entry_record(model, kappa, tables[(model, kappa)], run) for model, kappa, _, _ in ENTRIES]
    records.append(
        record(model="glyph_mlp", weights="77" * 32, kappa="max_logit", aurocs=[0.6, 0.58, 0.56], num_levels=3)
    )
    add_records(tmp_path / "paired", records, create=True, folder=run)
    return tmp_path / "paired"


def models_board(tmp_path: Path, seed: int = 0) -> Path:
    """The entries of :func:`paired_board`, each as a model of its own (``glyph_cnn.energy``, ...), so the site's one
    row per model shows them all as adjacent rows; the entry without a file too."""
    run = tmp_path / "run"
    tables = scores(np.random.default_rng(seed))
    records = []
    for model, kappa, _, _ in ENTRIES:
        rec = entry_record(model, kappa, tables[(model, kappa)], run)
        rec["model"]["name"] = f"{model}.{kappa}"
        records.append(rec)
    records.append(
        record(
            model="glyph_mlp.max_logit", weights="77" * 32, kappa="max_logit", aurocs=[0.6, 0.58, 0.56], num_levels=3
        )
    )
    add_records(tmp_path / "models", records, create=True, folder=run)
    return tmp_path / "models"
