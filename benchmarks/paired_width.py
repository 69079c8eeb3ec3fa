"""How much narrower a paired comparison is than an unpaired one: for two entries' per-image score files (Parquet, the
per-image file's columns), each level's ood-auroc, the mean ood-auroc and the id-auroc of A - B, with the paired and
the unpaired standard errors and 95% interval widths side by side and their ratio (unpaired / paired).

    python benchmarks/paired_width.py A.parquet B.parquet
    python benchmarks/paired_width.py --glyph softmax entropy   # glyph_cnn on the embedded glyph benchmark

``--glyph`` runs the example ``glyph_cnn`` on the embedded glyph benchmark with the two kappas and compares them from
the run's in-memory split scores, as the run's per-image files hold them (:func:`tables_from_evaluation`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import NormalDist

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def tables_from_evaluation(evaluation) -> dict[str, pd.DataFrame]:
    """Per kappa of a harness run (:class:`harness.outputs.Evaluation`), its per-image table as the run's per-image
    file holds it (:func:`harness.per_image.kappa_table`)."""
    from harness.per_image import kappa_table, multiclass_terms

    terms = multiclass_terms(evaluation.scores["id_test"])
    return {
        r.kappa: kappa_table(r, evaluation.scores, evaluation.benchmark, terms).to_pandas() for r in evaluation.results
    }


def width_rows(comparison) -> list[dict]:
    """One row per difference: the estimate, the paired and unpaired standard errors and interval widths (``2 z se``,
    before clipping to [-1, 1]), the ratio of the unpaired standard error to the paired one."""
    named = [(f"level {lv}", d) for lv, d in enumerate(comparison.levels)]
    named += [("mean ood-auroc", comparison.mean_ood_auroc), ("id-auroc", comparison.id_auroc)]
    rows = []
    for name, d in named:
        if d is None:
            continue
        z2 = 2.0 * NormalDist().inv_cdf(0.5 + d.confidence / 2.0)
        rows.append(
            {
                "difference": name,
                "a - b": d.estimate,
                "p": d.p_value,
                "paired se": d.se,
                "unpaired se": d.unpaired_se,
                "paired width": z2 * d.se,
                "unpaired width": z2 * d.unpaired_se,
                "ratio": d.unpaired_se / d.se if d.se > 0 else float("inf"),
            }
        )
    return rows


def glyph_tables(kappas: list[str]) -> list[pd.DataFrame]:
    """``glyph_cnn``'s per-image tables of ``kappas`` on the embedded glyph benchmark (a run on the CPU)."""
    from harness.run import evaluate

    evaluation = evaluate(str(ROOT / "examples" / "glyph_cnn.py"), kappas=kappas, device="cpu", progress=False)
    tables = tables_from_evaluation(evaluation)
    return [tables[k] for k in kappas]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="entry A's per-image file (or, with --glyph, its kappa)")
    parser.add_argument("b", help="entry B's per-image file (or, with --glyph, its kappa)")
    parser.add_argument("--glyph", action="store_true", help="compare two kappas of glyph_cnn on the glyph benchmark")
    args = parser.parse_args(argv)
    from harness.errors import HarnessError
    from harness.method.paired import compare_entries

    try:
        tables = glyph_tables([args.a, args.b]) if args.glyph else [pd.read_parquet(p) for p in (args.a, args.b)]
        comparison = compare_entries(*tables)
    except (HarnessError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"A = {args.a}, B = {args.b}; levels {comparison.num_levels[0]} and {comparison.num_levels[1]}")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(pd.DataFrame(width_rows(comparison)).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if comparison.id_auroc_missing:
        print(f"id-auroc: no comparison ({comparison.id_auroc_missing})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
