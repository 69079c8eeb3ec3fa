"""Shared test data for the site's tests: a small leaderboard of three models, one with a per-class drill-down; the
leaderboard of the README's three commands; one of many kappas."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pandas as pd

from lb_records import record, with_intervals
from leaderboard.store import add_records

NUM_LEVELS = 11


def png(rgb: tuple[int, int, int], size: int = 8) -> bytes:
    """A small solid-colour PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def drilldown_record(run: Path, model: str = "glyph_cnn", classes: int = 4) -> dict:
    """A harness record with a per-class drill-down (``classes`` OOD classes per level, the two hardest listed with
    thumbnails), its sidecar and thumbnails written under ``run``; verified by the leaderboard's worker."""
    rows, levels = [], []
    for level in range(NUM_LEVELS):
        aurocs = [round(0.55 + 0.04 * c + 0.01 * (NUM_LEVELS - level), 4) for c in range(classes)]
        names = [f"class {level}-{c} <i>" for c in range(classes)]
        for c, auroc in enumerate(aurocs):
            rows.append(
                {
                    "kappa": "softmax",
                    "level": level,
                    "class_id": f"n{level:02d}{c:03d}",
                    "class_index": level * classes + c,
                    "name": names[c],
                    "n": 10 + c,
                    "ood_auroc": auroc,
                    "mean_confidence": 0.3 + 0.01 * c,
                }
            )
        hardest = []
        for c in range(2):
            thumbs = [f"per_class/thumbnails/{level * classes + c}-{k}.png" for k in range(2)]
            for k, thumb in enumerate(thumbs):
                (run / thumb).parent.mkdir(parents=True, exist_ok=True)
                (run / thumb).write_bytes(png((40 * c, 20 * level, 100 + 50 * k)))
            hardest.append(
                {
                    "id": f"n{level:02d}{c:03d}",
                    "name": names[c],
                    "ood_auroc": aurocs[c],
                    "mean_confidence": 0.3 + 0.01 * c,
                    "thumbnails": thumbs,
                }
            )
        levels.append(
            {
                "level": level,
                "n_classes": classes,
                "hardest": hardest,
                "ood_auroc_quantiles": [aurocs[0], aurocs[1], (aurocs[1] + aurocs[2]) / 2, aurocs[2], aurocs[-1]],
            }
        )
    (run / "per_class").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(run / "per_class" / "per_class.parquet", index=False)
    return {
        **record(model=model, weights="44" * 32),
        "per_class": {"file": "per_class/per_class.parquet", "levels": levels},
    }


def small_board(tmp_path: Path) -> Path:
    """A leaderboard of three models: one with a per-class drill-down (verified), one in two kappas, one flagged."""
    board = tmp_path / "board"
    add_records(
        board,
        [drilldown_record(tmp_path / "run")],
        create=True,
        folder=tmp_path / "run",
        verified={"request": "00000000000a", "requests_repo": "org/requests", "worker": "gpu-1"},
    )
    add_records(
        board,
        [
            record(model="vit_tiny_patch16_224", weights="55" * 32),
            record(
                model="vit_tiny_patch16_224",
                weights="55" * 32,
                kappa="entropy",
                aurocs=[0.9 - 0.03 * i for i in range(NUM_LEVELS)],
            ),
            record(model="tf_efficientnet_b0", weights="66" * 32, acc=0.01),
        ],
    )
    return board


SUBMISSION = {"source": "submission", "code_sha256": "c0de" * 16}  # a submission file's kappa's params
# enough kappas that the win-rate table is wider than a 1280 px screen
WIDE_KAPPAS = (
    "softmax", "entropy", "max_logit", "energy", "mc_dropout", "mahalanobis", "knn", "vim", "react", "dice", "ash",
    "gradnorm", "kl_matching", "openmax", "gram", "doctor", "mls_scaled", "relation", "she", "klm", "rmd", "odin",
)  # fmt: skip


def wide_board(tmp_path: Path) -> Path:
    """A leaderboard of three models in every kappa of :data:`WIDE_KAPPAS` (odin with parameters) and in a submission
    file's kappa ``energy_sub``, each model's best entry."""
    records = []
    for m, model in enumerate(["convnext_tiny", "resnet50", "vit_small_patch16_224"]):
        weights = f"{m + 7}" * 64
        for i, kappa in enumerate(WIDE_KAPPAS):
            params = {"temperature": 1000, "epsilon": 0.0014} if kappa == "odin" else None
            aurocs = [round(0.9 - 0.005 * i - 0.02 * level - 0.01 * m, 4) for level in range(NUM_LEVELS)]
            records.append(
                record(model=model, weights=weights, kappa=kappa, params=params, aurocs=aurocs, acc=0.7 + 0.05 * m)
            )
        aurocs = [round(0.92 - 0.02 * level - 0.01 * m, 4) for level in range(NUM_LEVELS)]
        records.append(
            record(
                model=model, weights=weights, kappa="energy_sub", params=SUBMISSION, aurocs=aurocs, acc=0.7 + 0.05 * m
            )
        )
    add_records(tmp_path / "wide", records, create=True)
    return tmp_path / "wide"


SELECTIVE = {"aurc": 0.0037, "e_aurc": 0.0036, "sac_95": 1.0, "sac_99": 0.8715}  # the ID metrics every record holds
CALIBRATION = {"ece": 0.0819, "ece_mass": 0.0796, "nll": 0.1081, "brier": 0.0237}  # a probability kappa's
MULTICLASS = {"nll_multiclass": 0.1312, "brier_multiclass": 0.0497}  # the classifier's, in every kappa's record
README_KAPPAS = {
    "glyph_cnn": [
        ("softmax", None),
        ("energy", {"temperature": 1.0}),
        ("ash", {"percentile": 0.65, "variant": "ash-s"}),
    ],
    "glyph_mlp": [("softmax", None), ("entropy", None), ("max_logit", None), ("energy", {"temperature": 1.0})],
}  # what the README's two runs evaluate (glyph_mlp also in its own kappa, margin)


def harness_record(rec: dict) -> dict:
    """``rec`` as a harness run writes it: with every interval, the selective metrics, for softmax calibration, the
    classifier's multi-class scores and the OOD-positive FPRs."""
    rec = with_intervals(rec)
    rec["id"].update(SELECTIVE)
    rec["id"].update(CALIBRATION if rec["kappa"]["name"] == "softmax" else dict.fromkeys(CALIBRATION))
    rec["id"].update(MULTICLASS)
    for level in rec["levels"]:
        level["window_percentile"] = level["percentile"]
        level["fpr_at_95_tpr_ood"] = round(level["fpr_at_95_tpr"] - 0.1, 6)
        level["fpr_at_99_tpr_ood"] = round(level["fpr_at_99_tpr"] - 0.1, 6)
    return rec


def readme_board(tmp_path: Path) -> Path:
    """The leaderboard of the README's three commands: glyph_cnn in softmax (with a per-class drill-down), energy and
    ash; glyph_mlp in four kappas and its own ``margin``; records as a harness run writes them."""
    records = [harness_record(drilldown_record(tmp_path / "run"))]
    for m, (model, kappas) in enumerate(README_KAPPAS.items()):
        for i, (kappa, params) in enumerate(kappas[1:] if model == "glyph_cnn" else kappas):
            aurocs = [round(0.94 - 0.4 * m - 0.01 * i - 0.01 * level, 4) for level in range(NUM_LEVELS)]
            weights = "77" * 32 if m else "44" * 32  # glyph_cnn's: its drill-down record's
            rec = record(model=model, weights=weights, kappa=kappa, params=params, aurocs=aurocs, acc=0.98 - 0.6 * m)
            records.append(harness_record(rec))
    margin = record(model="glyph_mlp", weights="77" * 32, kappa="margin", params=SUBMISSION, acc=0.38)
    records.append(harness_record(margin))
    add_records(tmp_path / "readme", records, create=True, folder=tmp_path / "run")
    return tmp_path / "readme"
