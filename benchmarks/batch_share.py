"""Whether a batch's ID share says which of its rows are ID, and what mixing rows costs.

    python benchmarks/batch_share.py                          # the oracle, simulated and on a real pass
    python benchmarks/batch_share.py --before 37e7aa7 --repeats 1   # and the quick start's pass, before and now

The oracle: each row's batch ID share (the share of ID rows among the other rows of its batch) used as a score of ID
against OOD, its AUROC (average ranks; 0.5: it tells nothing). Measured over ``--seeds`` secret orders on the embedded
glyph benchmark's manifest (its evaluation shards and their sizes), with the harness's own interleave code on fake
chunks of those sizes (1 reader, the CPU default, and 4, as DataLoader workers read in turn), beside the same with the
merge of shards the harness had before rows were mixed (:func:`old_merged`, a copy kept here for the comparison only);
then on one real pass's batches (the loader reading and decoding the benchmark's images, this tree's code). Also
printed: the median ID share of the batches that hold any ID row, against the pass's ID share, and, for the rows of
the small (per-class) shards, the share of a row's batch neighbours from its own shard, so of its class (a random
draw's: about 0.0006).

With ``--before``, the README's quick start is run with that commit's code and with this tree's, one after the other,
``--repeats`` times, each with a fresh score cache (the benchmark built once, shared): the seconds of their evaluation
passes (the pass and its re-check) side by side, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from order_cost import passes_s
from same_records import ROOT, git, run_quick_start
from scipy.stats import rankdata

from dataset_builder.benchmark import Benchmark
from dataset_builder.embedded import embedded_benchmark
from harness.runtime.data import ShardStream
from harness.runtime.interleave import Mixer, derived, secret_order
from harness.runtime.scoring import EVAL_SPLITS

BATCH = 256  # the harness's default batch size


def oracle_auroc(batches: list[list[bool]]) -> float:
    """The AUROC of each row's batch ID share (among the other rows of its batch) separating ID rows from OOD ones;
    batches of one row are left out."""
    shares, is_id = [], []
    for batch in batches:
        flags = np.asarray(batch, dtype=float)
        if len(flags) > 1:
            shares.append((flags.sum() - flags) / (len(flags) - 1))
            is_id.append(flags.astype(bool))
    shares, is_id = np.concatenate(shares), np.concatenate(is_id)
    ranks = rankdata(shares)
    positives = is_id.sum()
    return float((ranks[is_id].sum() - positives * (positives + 1) / 2) / (positives * (len(ranks) - positives)))


def median_id_share(batches: list[list[bool]]) -> float:
    """The median ID share of the batches holding an ID row."""
    return float(np.median([np.mean(b) for b in batches if any(b)]))


def same_shard_share(batches: list[list[str]], small: set[str]) -> float:
    """The mean share of a row's batch neighbours read from its own shard, over the rows of the ``small`` shards."""
    shares = []
    for paths in batches:
        _, inverse, counts = np.unique(paths, return_inverse=True, return_counts=True)
        mine = np.asarray([path in small for path in paths])
        if len(paths) > 1:
            shares.append(((counts[inverse] - 1) / (len(paths) - 1))[mine])
    return float(np.concatenate(shares).mean())


# --- the merge of shards before rows were mixed: a copy of the harness's code of then, for the comparison only ---
OLD_OPEN_SHARDS = 8


def old_merged(opened: list[tuple[int, Callable[[], Iterator[dict]]]], seed: int) -> Iterator[dict]:
    """(Before) the chunks of several shards, ``OLD_OPEN_SHARDS`` open at once, each next chunk from an open shard
    drawn in proportion to the rows it has left."""
    rng = random.Random(seed)
    waiting = list(reversed(opened))
    live: list[list] = []
    while waiting or live:
        while waiting and len(live) < OLD_OPEN_SHARDS:
            rows, start = waiting.pop()
            live.append([rows, start()])
        pick = rng.choices(range(len(live)), weights=[max(rows, 1) for rows, _ in live])[0]
        chunk = next(live[pick][1], None)
        if chunk is None:
            live.pop(pick)
            continue
        yield chunk
        if "error" in chunk:
            return
        live[pick][0] -= len(chunk["keys"])


# --- end of the copy ---


def fake_chunks(shard: dict, rows: int) -> Iterator[dict]:
    """A shard's chunks of ``rows`` rows, its rows' labels 1 for ID and 0 for OOD, no images."""
    n, flag = shard["num_samples"], int(shard["split"] == "id_test")
    for start in range(0, n, rows):
        size = min(rows, n - start)
        yield {
            "shard": shard["path"],
            "shards": [(shard["path"], size)],
            "keys": [f"{shard['path']}/{start + i}" for i in range(size)],
            "labels": torch.full((size,), flag),
            "images": torch.zeros(size, dtype=torch.uint8),
        }


class FakeStream(ShardStream):
    """The harness's merged reading, on fake chunks of the manifest's shards."""

    def __init__(self, groups: list[list[dict]], order_seed: int):
        torch.utils.data.IterableDataset.__init__(self)
        self.groups, self.order_seed, self.batch_size = groups, order_seed, BATCH

    def _guarded(self, shard: dict, rows: int) -> Iterator[dict]:
        return fake_chunks(shard, rows)


def in_turn(streams: list[Iterator[dict]]) -> Iterator[dict]:
    """Chunks of several readers taken in turn, as a DataLoader takes its workers'."""
    live = list(streams)
    while live:
        for stream in list(live):
            chunk = next(stream, None)
            if chunk is None:
                live.remove(stream)
            else:
                yield chunk


def simulated(shards: list[dict], order_seed: int, readers: int, old: bool) -> list[dict]:
    """The batches of one pass over ``shards`` in the secret order of ``order_seed``, as the harness draws them."""
    seed = derived(order_seed, "rank", 0, *EVAL_SPLITS)
    groups = [[shard] for shard in secret_order(shards, seed)]
    if old:
        streams = [
            old_merged(
                [(s["num_samples"], lambda s=s: fake_chunks(s, BATCH)) for (s,) in groups[r::readers]],
                derived(seed, "reader", r),
            )
            for r in range(readers)
        ]
    else:
        stream = FakeStream(groups, seed)
        streams = [stream.read(r, readers) for r in range(readers)]
    return list(Mixer(BATCH, seed).batches(in_turn(streams)))


def figures(batches: list[dict], id_paths: set[str], small: set[str]) -> tuple[float, float, float]:
    """A pass's oracle AUROC, median ID share of the batches holding ID rows, same-shard share of ``small`` rows."""
    flags = [[path in id_paths for path in b["rows"]] for b in batches]
    return oracle_auroc(flags), median_id_share(flags), same_shard_share([b["rows"] for b in batches], small)


def real_pass(folder: Path, order_seed: int) -> list[dict]:
    """The batches of one real pass of this tree's loader over the benchmark's evaluation splits (CPU, no worker)."""
    import importlib.util

    from harness.runtime.data import Loader, Reading
    from harness.runtime.decoding import make_decoder
    from harness.submission import timm_transform

    spec = importlib.util.spec_from_file_location("glyph_cnn", ROOT / "examples" / "glyph_cnn.py")
    cnn = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cnn)
    bench = Benchmark.open(folder)
    decoder = make_decoder("torchvision", timm_transform(cnn.DATA_CONFIG), 1, bench.max_image_pixels)
    label_of = dict(zip(bench.id_classes["id"], bench.id_classes["index"]))
    label_of |= dict(zip(bench.ood_classes["id"], bench.ood_classes["index"]))
    seed = derived(order_seed, "rank", 0, *EVAL_SPLITS)
    shards = secret_order([s for split in EVAL_SPLITS for s in bench.shards(split)], seed)
    loader = Loader(bench, decoder, Reading(BATCH, workers=0))
    try:
        return [{"rows": b["rows"]} for b in loader.batches([[s] for s in shards], label_of, seed)]
    finally:
        loader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8, help="secret orders simulated")
    parser.add_argument("--no-real", action="store_true", help="skip the real pass")
    parser.add_argument("--before", help="a commit to time the quick start's pass against")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    folder = embedded_benchmark("glyphs", progress=False)
    bench = Benchmark.open(folder)
    shards = [s for split in EVAL_SPLITS for s in bench.shards(split)]
    id_paths = {s["path"] for s in shards if s["split"] == "id_test"}
    small = {s["path"] for s in shards if s["num_samples"] < BATCH}
    rows = sum(s["num_samples"] for s in shards)
    id_rows = sum(s["num_samples"] for s in shards if s["path"] in id_paths)
    print(
        f"glyph manifest: {len(shards)} evaluation shards, {rows:,} rows, {id_rows:,} ID ({id_rows / rows:.1%}); "
        f"batches of {BATCH}; {len(small)} small shards, a random draw's same-shard neighbour share of their rows: "
        f"{statistics.mean(s['num_samples'] - 1 for s in shards if s['path'] in small) / (rows - 1):.4f}"
    )
    print(
        f"{'readers':>7} {'seed':>4} | {'before: AUROC':>13} {'median ID':>9} {'same shard':>10} | "
        f"{'now: AUROC':>10} {'median ID':>9} {'same shard':>10}"
    )
    for readers in (1, 4):
        table = {"before": [], "now": []}
        for seed in range(args.seeds):
            for name in table:
                table[name].append(figures(simulated(shards, seed, readers, name == "before"), id_paths, small))
            (a, m, s), (a2, m2, s2) = table["before"][-1], table["now"][-1]
            print(f"{readers:>7} {seed:>4} | {a:>13.3f} {m:>9.1%} {s:>10.4f} | {a2:>10.3f} {m2:>9.1%} {s2:>10.4f}")
        for name, values in table.items():
            aurocs = [v[0] for v in values]
            print(f"{readers:>7} {name:>6}: oracle AUROC mean {np.mean(aurocs):.3f}, max {max(aurocs):.3f}")
    if not args.no_real:
        aurocs = []
        for seed in range(2):
            auroc, median, same = figures(real_pass(folder, seed), id_paths, small)
            aurocs.append(auroc)
            print(
                f"real pass (now, 1 reader), seed {seed}: oracle AUROC {auroc:.3f}, median ID share {median:.1%}, "
                f"same-shard neighbours {same:.4f}"
            )
    if args.before:
        timed(args.before, args.repeats, folder.parent.parent)


def timed(before: str, repeats: int, benchmarks: Path) -> None:
    """The quick start's evaluation pass with ``before``'s code and with this tree's, side by side."""
    work = Path(tempfile.mkdtemp(prefix="batch-share-"))
    tree = work / "before-tree"
    git("worktree", "add", "--detach", str(tree), git("rev-parse", "--verify", f"{before}^{{commit}}"))
    runs: dict[str, list[float]] = {"before": [], "now": []}
    try:
        for i in range(repeats):
            for name, code in (("before", tree), ("now", ROOT)):
                out = run_quick_start(code, work / f"{name}-{i}", benchmarks=benchmarks)
                runs[name].append(passes_s(out)[0])
    finally:
        git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(work, ignore_errors=True)
    for i, (old, new) in enumerate(zip(runs["before"], runs["now"])):
        print(f"run {i}: evaluation pass + re-check: before {old:.1f} s, now {new:.1f} s")
    old, new = (statistics.median(runs[name]) for name in ("before", "now"))
    print(f"median: before {old:.1f} s, now {new:.1f} s: {new / old:.2f}x the pass of before")


if __name__ == "__main__":
    main()
