"""How often the private images' check flags an honest model: the example models (``glyph_cnn``, ``glyph_mlp``) on
glyph benchmarks built with a private part from ``--draws`` private seeds, each run sandboxed with the default kappas;
prints each draw's private and public mean ood-auroc and p-value per entry, and how many draws flagged each model (an
entry flagged: its private scores fall below the public ones at the test's 1% level). The memorising file of
``tests/sandbox/test_private_images.py`` is flagged on every draw it is run on (``--cheat``). First, what setting the
private images aside changes in the public numbers: each model on the same benchmark built without a private part
and with the first draw's, its levels' classes compared and its public ood-aurocs side by side.

    python benchmarks/private_flags.py --draws 20 --size default --share 0.15
"""

from __future__ import annotations

import argparse
import hashlib
import io
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))

SIZES = {  # builder options: the tests' tiny benchmark with twice its test images, a quarter of the default one, and
    # the embedded one (no training split: nothing is trained here)
    "tiny": dict(seed=0, pool_size=48, images_per_class=32, n_test=16, id_test_per_class=16, id_train_per_class=0),
    "small": dict(seed=0, pool_size=100, images_per_class=100, n_test=25, id_test_per_class=25, id_train_per_class=0),
    "default": dict(seed=0, pool_size=400, images_per_class=200, n_test=50, id_test_per_class=50, id_train_per_class=0),
}
MODELS = ["glyph_cnn", "glyph_mlp"]


def public_id_hashes(benchmark: Path) -> list[str]:
    from dataset_builder.benchmark import Benchmark
    from dataset_builder.shards import read_shard

    bench = Benchmark.open(benchmark)
    return [
        hashlib.sha256(np.asarray(Image.open(io.BytesIO(s[bench.image_ext])).convert("L")).tobytes()).hexdigest()
        for shard in bench.shards("id_test")
        for s in read_shard(bench.shard_path(shard))
    ]


def cheat_file(folder: Path, benchmark: Path) -> Path:
    from attacks import hostile_file
    from test_private_images import MEMORY

    folder.mkdir()
    (folder / "memory.txt").write_text("\n".join(public_id_hashes(benchmark)))
    return Path(hostile_file(folder, MEMORY, benchmark))


def cached(work: Path) -> dict:
    """A score cache shared by the draws: their public shards are the same bytes, so only the private images (and
    the re-check) cross the model again."""
    return {"cache": True, "cache_dir": work / "scores"}


def one_draw(work: Path, size: str, share: float, seed: int, cheat: bool) -> dict[str, list]:
    """The evaluations of each model (and the cheat) on a benchmark whose private part comes from ``seed``."""
    from dataset_builder.glyphs.build import build
    from harness import evaluate

    bench = work / f"glyphs-{seed}"
    build(bench, progress=False, **SIZES[size], private_share=share, private_seed=seed)
    files = {name: ROOT / "examples" / f"{name}.py" for name in MODELS}
    if cheat:
        files["memorised"] = cheat_file(work / f"cheat-{seed}", bench)
    evaluations = {
        name: evaluate(path, benchmark=bench, progress=False, **cached(work)) for name, path in files.items()
    }
    shutil.rmtree(bench)
    return evaluations


def public_change(work: Path, size: str, with_private: dict[str, object]) -> None:
    """Print, per model and kappa, whether its levels hold the same classes on a build without a private part as in
    ``with_private`` (a draw's evaluations), and the public mean and largest per-level change of the ood-auroc."""
    from dataset_builder.glyphs.build import build
    from harness import evaluate

    bench = work / "glyphs-whole"
    build(bench, progress=False, **SIZES[size], private_share=0.0)
    print("public numbers, without the private part -> with it:")
    for name in MODELS:
        whole = evaluate(ROOT / "examples" / f"{name}.py", benchmark=bench, progress=False, **cached(work))
        for before, after in zip(whole.results, with_private[name].results):
            same = np.array_equal(before.levels.classes, after.levels.classes)
            levels = [[row["ood_auroc"] for row in r.rows] for r in (before, after)]
            print(
                f"  {name:10s} {before.kappa:10s} same level classes: {same}   mean ood-auroc "
                f"{before.mean_ood_auroc:.4f} -> {after.mean_ood_auroc:.4f}   largest level change "
                f"{np.max(np.abs(np.subtract(*levels))):.4f}",
                flush=True,
            )
    shutil.rmtree(bench)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--share", type=float, default=0.25)
    parser.add_argument("--cheat", action="store_true", help="also run the memorising file on each draw")
    args = parser.parse_args()
    flagged: dict[str, int] = {}
    entries = {"flagged": 0, "all": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(1, args.draws + 1):
            evaluations = one_draw(Path(tmp), args.size, args.share, seed, args.cheat)
            if seed == 1:
                public_change(Path(tmp), args.size, evaluations)
            for name, evaluation in evaluations.items():
                records = evaluation.records
                bad = [r for r in records if not r["private"]["reproduced"]]
                flagged[name] = flagged.get(name, 0) + bool(bad)
                if name in MODELS:
                    entries["flagged"] += len(bad)
                    entries["all"] += len(records)
                cells = "  ".join(
                    f"{r['kappa']['name']} {r['summary']['mean_ood_auroc']:.3f}/{r['private']['mean_ood_auroc']:.3f} "
                    f"p={r['private']['p_value']:.2g}"
                    for r in records
                )
                print(f"draw {seed:2d} {name:10s} {cells}", flush=True)
    print(f"\n{args.draws} private draws ({args.size} glyph benchmark, share {args.share}):")
    for name, count in flagged.items():
        print(f"  {name}: flagged on {count} of {args.draws} draws")
    print(f"  honest entries flagged: {entries['flagged']} of {entries['all']} (the test's level: 1%)")


if __name__ == "__main__":
    main()
