"""Every pytorch-ood 0.4.0 detector class on ``glyph_cnn`` and the embedded benchmark: docs/kappas.md's coverage table.

One pass keeps the logits and features of the fit split and the three evaluation splits in a score cache; then every
supported detector that reads them is fitted and scored from the cache alone (the run's stats must show no image
forwarded), and the detectors that need the model take their own passes. Prints a markdown table of all 35 classes:
the kappa it is, or why it is not one; what it reads; whether it fits; its parameters and defaults; the level-0 and
level-10 ood-auroc; its fit time and its scoring time over the evaluation splits.

    python benchmarks/detector_coverage.py [--mc-passes 30] [--cache-dir DIR] [--skip-model-kappas] [--doc FILE]

``--skip-model-kappas`` lists the detectors that take their own passes through the model without measuring them (on
CPU those passes take most of the time: MC-dropout alone is ``--mc-passes`` passes over every image); ``--doc``
writes the table into the "Detector coverage" section of docs/kappas.md, between its markers.
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
from pathlib import Path

from pytorch_ood import detector as pod

from harness.kappas import registry
from harness.kappas.ood_bridge import KAPPA_OF, NOT_BRIDGED, SAME_AS_PAPER_KAPPA
from harness.run import evaluate

MODEL = str(Path(__file__).resolve().parents[1] / "examples" / "glyph_cnn.py")
EVAL_SPLITS = ("id_test", "ood_estimation", "ood_test")
START, END = "<!-- detector-coverage:start -->", "<!-- detector-coverage:end -->"
# glyph_cnn has no timm feature_info: the detectors that read intermediate layers read its three conv blocks
GLYPH_LAYERS = "layers=features.0,features.1,features.2"
# bridged, but glyph_cnn has not what they read: what they read, and why glyph_cnn cannot run them
NOT_ON_GLYPH_CNN = {
    "rankfeat": (
        "the model (own passes): spatial maps of forward_features, then forward_head",
        "not on glyph_cnn: it has no forward_features/forward_head split (a timm CNN has, a submission may define it)",
    ),
    "mcm": (
        "the model (own passes): CLIP's image embedding and the ID class names' text embeddings",
        "not on glyph_cnn: it needs a CLIP model (an open_clip: target)",
    ),
}


def kappa_of(cls_name: str) -> str | None:
    registry()  # registers every kappa, KAPPA_OF filled
    return {**SAME_AS_PAPER_KAPPA, **KAPPA_OF}.get(cls_name)


def run(kappa: str, cache_dir: Path, mc_passes: int) -> dict:
    """One kappa alone on the shared cache: its record's first and last level, fit and score seconds, images
    forwarded."""
    options = {"mc_passes": mc_passes} if kappa == "mc_dropout" else {}
    request = f"{kappa}:{GLYPH_LAYERS}" if registry().get(kappa).reads_layers else kappa
    evaluation = evaluate(MODEL, kappas=[request], cache=True, cache_dir=cache_dir, progress=False, **options)
    (rec,) = evaluation.records
    timings = rec["timings"]
    fit_split = rec["kappa"]["params"].get("fit", {}).get("split")
    return {
        "l0": rec["levels"][0]["ood_auroc"],
        "l10": rec["levels"][-1]["ood_auroc"],
        "fit_s": timings.get(f"{fit_split}_s") if fit_split else None,
        "score_s": timings["evaluation_s"],
        "forwarded": timings["images_forwarded"],
    }


def reads(needs: frozenset) -> str:
    order = ("logits", "features", "head", "layers", "model")
    words = {
        "logits": "logits",
        "features": "features",
        "head": "last layer",
        "layers": "intermediate layers",
        "model": "the model (own passes)",
    }
    return ", ".join(words[n] for n in order if n in needs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mc-passes", type=int, default=30, help="MC-dropout passes (each is a pass over every image)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="score cache (default: a temporary folder)")
    parser.add_argument(
        "--skip-model-kappas", action="store_true", help="do not measure the kappas that need the model"
    )
    parser.add_argument(
        "--doc",
        "--readme",
        dest="doc",
        type=Path,
        default=None,
        help="write the table into this file's coverage section (docs/kappas.md)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = args.cache_dir or Path(tmp)
        # the one pass: logits and features of every split, the fit split's too (knn:k=1 needs a fit)
        first = evaluate(MODEL, kappas=["softmax", "knn:k=1"], cache=True, cache_dir=cache_dir, progress=False)
        print(f"one pass: {first.records[0]['timings']['images_forwarded']} images forwarded", flush=True)
        rows = []
        for name in pod.__all__:
            cls = getattr(pod, name)
            if not inspect.isclass(cls):
                continue
            kappa = kappa_of(name)
            if kappa is None:
                rows.append(f"| {name} | no: {NOT_BRIDGED[name]} | | | | | | | |")
                continue
            kdef = registry().get(kappa)
            params = ", ".join(f"{k}={v}" for k, v in kdef.defaults.items()) or "none"
            if kappa in NOT_ON_GLYPH_CNN:
                what, why = NOT_ON_GLYPH_CNN[kappa]
                rows.append(f"| {name} | `{kappa}` ({kdef.source}) | {what} | no | {params} | {why} | | - | - |")
                continue
            if args.skip_model_kappas and kdef.needs_model:
                rows.append(
                    f"| {name} | `{kappa}` ({kdef.source}) | {reads(kdef.needs)} | no | {params} "
                    "| not measured | (own passes) | - | - |"
                )
                continue
            measured = run(kappa, cache_dir, args.mc_passes)
            if not kdef.needs_model and measured["forwarded"]:
                raise SystemExit(f"{kappa} forwarded {measured['forwarded']} images; it should read the cache only")
            if kappa == "mc_dropout" and args.mc_passes != kdef.defaults["passes"]:
                params += f" (measured with passes={args.mc_passes})"
            if kdef.reads_layers:
                params += f" (measured with {GLYPH_LAYERS})"
            fit = f"{measured['fit_s']:.1f}" if measured["fit_s"] is not None else "-"
            fitted = "yes" if kdef.needs_fit else "no"
            rows.append(
                f"| {name} | `{kappa}` ({kdef.source}) | {reads(kdef.needs)} | {fitted} "
                f"| {params} | {measured['l0']:.4f} | {measured['l10']:.4f} | {fit} | {measured['score_s']:.1f} |"
            )
            print(rows[-1], flush=True)
    table = "\n".join(
        [
            "| pytorch-ood class | kappa (source) | reads | fits | parameters (defaults) | ood-auroc level 0 "
            "| level 10 | fit s | score s |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print()
    print(table)
    if args.doc is not None:
        write_section(args.doc, table)


def write_section(doc: Path, table: str) -> None:
    """Replace what lies between the coverage markers in ``doc`` with ``table``."""
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{doc} has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    doc.write_text(f"{head}{START}\n{table}\n{END}{rest.split(END, 1)[1]}")


if __name__ == "__main__":
    main()
