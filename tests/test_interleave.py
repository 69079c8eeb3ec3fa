"""The secret order's pieces on their own: the mixer's batches and the readers' mixing of shards row by row."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from harness.runtime.data import ShardStream
from harness.runtime.interleave import MIXED_BATCHES, Mixer, derived, gathered, merged, secret_order


def chunks(sizes: list[int], field: str = "pixels") -> list[dict]:
    """Chunks of one shard each, ``sizes`` rows, each row's pixels filled with its own number."""
    out, n = [], 0
    for s, size in enumerate(sizes):
        rows = torch.arange(n, n + size)
        out.append(
            {
                "shard": f"shard-{s}",
                "keys": [f"k{i}" for i in rows.tolist()],
                "labels": rows % 7,
                field: rows.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 3, 2, 2).contiguous(),
            }
        )
        n += size
    return out


def test_the_mixer_draws_every_row_once_in_full_batches_but_the_last_and_keeps_each_rows_data():
    sizes = [5, 300, 17, 1, 64, 90, 3, 250]
    batches = list(Mixer(32, seed=3).batches(iter(chunks(sizes))))
    assert [len(b["keys"]) for b in batches[:-1]] == [32] * (len(batches) - 1)
    assert len(batches[-1]["keys"]) == sum(sizes) - 32 * (len(batches) - 1)
    keys = [k for b in batches for k in b["keys"]]
    assert sorted(keys) == sorted(f"k{i}" for i in range(sum(sizes)))
    assert keys != sorted(keys, key=lambda k: int(k[1:]))  # mixed, not in reading order
    for batch in batches:
        rows = torch.tensor([int(k[1:]) for k in batch["keys"]])
        assert torch.equal(batch["labels"], rows % 7)
        assert torch.equal(batch["pixels"][:, 0, 0, 0], rows.to(torch.uint8))
        shard_of = {k: c["shard"] for c in chunks(sizes) for k in c["keys"]}
        assert batch["rows"] == [shard_of[k] for k in batch["keys"]]


def test_the_mixer_draws_the_same_batches_for_a_seed_and_others_for_another():
    def keys(seed: int) -> list[list[str]]:
        return [b["keys"] for b in Mixer(16, seed).batches(iter(chunks([40, 40, 40, 40], "images")))]

    assert keys(1) == keys(1)
    assert keys(1) != keys(2)


def test_the_mixer_waits_for_several_batches_of_rows_before_its_first_draw():
    seen = []

    def counted():
        for chunk in chunks([8] * 40):
            seen.append(len(chunk["keys"]))
            yield chunk

    first = next(Mixer(8, seed=0).batches(counted()))
    assert sum(seen) == 8 * MIXED_BATCHES
    assert len(first["keys"]) == 8


def test_an_error_chunk_ends_the_batches_and_the_source_is_closed():
    closed = []

    def source():
        try:
            yield from chunks([10, 10])
            yield {"shard": "bad", "error": "corrupt shard bad"}
            yield from chunks([10])
        finally:
            closed.append(True)

    batches = list(Mixer(64, seed=0).batches(source()))
    assert batches == [{"shard": "bad", "error": "corrupt shard bad"}]
    assert closed == [True]


def test_gathered_rows_equal_the_rows_taken_one_by_one():
    parts = chunks([6, 9, 4])
    rows = [(parts[1], 3), (parts[0], 5), (parts[2], 0), (parts[1], 8), (parts[0], 0)]
    for name, tensor in gathered(rows, ("labels", "pixels")).items():
        assert torch.equal(tensor, torch.stack([c[name][i] for c, i in rows]))


def shard_chunks(path: str, n: int, rows: int = 4) -> list[dict]:
    """A shard's chunks of ``rows`` rows, as a reader reads them: keys ``<path>-<i>``, labels ``i``."""
    return [
        {
            "shard": path,
            "shards": [(path, min(rows, n - start))],
            "keys": [f"{path}-{i}" for i in range(start, min(n, start + rows))],
            "labels": torch.arange(start, min(n, start + rows)),
            "pixels": torch.arange(start, min(n, start + rows)).to(torch.uint8).view(-1, 1),
        }
        for start in range(0, n, rows)
    ]


def opened(sizes: dict[str, list[int]]) -> list[tuple]:
    """Shards of several splits for :func:`merged`, named ``<split><number>``."""
    return [
        (split, n, lambda path=f"{split}{s}", n=n: iter(shard_chunks(path, n)))
        for split, ns in sizes.items()
        for s, n in enumerate(ns)
    ]


def test_merged_reads_every_row_once_with_its_own_data_and_shard_in_chunks_of_equal_sizes():
    sizes = {"id": [200, 3], "ood": [5] * 40 + [0, 120]}
    chunks = list(merged(opened(sizes), seed=9, chunk_rows=32))
    rows = sum(map(sum, sizes.values()))
    count = -(-rows // 32)  # as few chunks as hold 32 rows each, of sizes as equal as may be
    assert len(chunks) == count and {len(c["keys"]) for c in chunks} <= {rows // count, rows // count + 1}
    keys = [k for c in chunks for k in c["keys"]]
    assert sorted(keys) == sorted(
        f"{split}{s}-{i}" for split, ns in sizes.items() for s, n in enumerate(ns) for i in range(n)
    )
    for chunk in chunks:
        assert chunk["rows"] == [k.split("-")[0] for k in chunk["keys"]]
        assert torch.equal(chunk["labels"], torch.tensor([int(k.split("-")[1]) for k in chunk["keys"]]))
        assert torch.equal(chunk["pixels"][:, 0], chunk["labels"].to(torch.uint8))
        assert [p for p, n in chunk["shards"] for _ in range(n)] == chunk["rows"]
    assert len({c["rows"][0] for c in chunks}) > 1 and max(len(set(c["rows"])) for c in chunks) > 5  # rows mixed
    again = list(merged(opened(sizes), seed=9, chunk_rows=32))
    assert [c["keys"] for c in again] == [c["keys"] for c in chunks]
    assert [c["keys"] for c in merged(opened(sizes), seed=10, chunk_rows=32)] != [c["keys"] for c in chunks]


def test_merged_spreads_a_large_shard_over_the_whole_stream():
    keys = [k for c in merged(opened({"ood": [200] + [5] * 40}), seed=9, chunk_rows=8) for k in c["keys"]]
    large = [at for at, k in enumerate(keys) if k.startswith("ood0-")]
    assert large[0] < len(keys) // 20 and large[-1] > len(keys) * 0.9


def test_merged_ends_with_an_error_chunk():
    def bad():
        yield from shard_chunks("bad", 6)
        yield {"shard": "bad", "error": "corrupt shard bad"}

    chunks = list(merged([("ood", 6, bad), *opened({"id": [100]})], seed=0, chunk_rows=16))
    assert chunks[-1] == {"shard": "bad", "error": "corrupt shard bad"}
    assert all("error" not in c for c in chunks[:-1])


def oracle_auroc(batches: list[list[bool]]) -> float:
    """The AUROC of each row's batch ID share (among the other rows of its batch) separating ID rows from OOD rows."""
    flags = [np.asarray(b, dtype=float) for b in batches if len(b) > 1]
    shares = np.concatenate([(f.sum() - f) / (len(f) - 1) for f in flags])
    is_id = np.concatenate(flags).astype(bool)
    ranks, positives = rankdata(shares), is_id.sum()
    return float((ranks[is_id].sum() - positives * (positives + 1) / 2) / (positives * (len(ranks) - positives)))


class FakeStream(ShardStream):
    """A reader's merged reading (:meth:`ShardStream.read`) on fake shards: each row's label says whether it is ID."""

    def __init__(self, groups: list[list[dict]], order_seed: int, batch_size: int):
        torch.utils.data.IterableDataset.__init__(self)
        self.groups, self.order_seed, self.batch_size = groups, order_seed, batch_size

    def _guarded(self, shard: dict, rows: int):
        n, flag = shard["num_samples"], shard["split"] == "id_test"
        for start in range(0, n, rows):
            size = min(rows, n - start)
            yield {
                "shard": shard["path"],
                "keys": [f"{shard['path']}-{start + i}" for i in range(size)],
                "labels": torch.full((size,), int(flag)),
                "pixels": torch.zeros((size, 1), dtype=torch.uint8),
            }


def glyph_shaped() -> list[dict]:
    """Shards shaped as the glyph benchmark's evaluation splits, smaller: a few big ID shards, a few big OOD ones
    and many small per-class OOD ones."""
    sizes = {"id_test": [300, 150], "ood_estimation": [1000] * 4, "ood_test": [25] * 120}
    return [
        {"path": f"{split}/{s}", "split": split, "num_samples": n}
        for split, ns in sizes.items()
        for s, n in enumerate(ns)
    ]


def pass_batches(shards: list[dict], order_seed: int, readers: int, batch_size: int = 64) -> list[dict]:
    """One pass's batches as the harness draws them: the secret order, the readers read in turn, the mixer."""
    groups = [[shard] for shard in secret_order(shards, order_seed)]
    stream = FakeStream(groups, order_seed, batch_size)
    live = [stream.read(r, readers) for r in range(readers)]

    def in_turn():
        while live:
            for reader in list(live):
                chunk = next(reader, None)
                if chunk is None:
                    live.remove(reader)
                else:
                    yield chunk

    return list(Mixer(batch_size, order_seed).batches(in_turn()))


@pytest.mark.parametrize("readers", [1, 3])
def test_a_batchs_id_share_says_nothing_of_which_of_its_rows_are_id(readers):
    shards = glyph_shaped()
    id_paths = {s["path"] for s in shards if s["split"] == "id_test"}
    for seed in range(3):
        batches = pass_batches(shards, derived(seed, "test"), readers)
        assert [len(b["keys"]) for b in batches[:-1]] == [64] * (len(batches) - 1)
        keys = [k for b in batches for k in b["keys"]]
        assert sorted(keys) == sorted(f"{s['path']}-{i}" for s in shards for i in range(s["num_samples"]))
        flags = [[path in id_paths for path in b["rows"]] for b in batches]
        assert all(b["labels"].tolist() == f for b, f in zip(batches, flags))
        assert oracle_auroc(flags) <= 0.55
    assert [b["keys"] for b in pass_batches(shards, derived(seed, "test"), readers)] == [b["keys"] for b in batches]


def test_the_secret_order_of_shards_is_a_permutation_fixed_by_its_seed():
    shards = list(range(50))
    assert sorted(secret_order(shards, 4)) == shards
    assert secret_order(shards, 4) == secret_order(shards, 4) != secret_order(shards, 5)
