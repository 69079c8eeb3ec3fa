"""The secret order's pieces on their own: the mixer's batches and the merge of open shards."""

from __future__ import annotations

import torch

from harness.runtime.interleave import MIXED_BATCHES, Mixer, gathered, merged, secret_order


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
    for name in ("labels", "pixels"):
        assert torch.equal(gathered(rows, name), torch.stack([c[name][i] for c, i in rows]))


def test_merged_reads_every_chunk_once_and_spreads_a_large_shard_among_the_others():
    shards = [
        (n, lambda n=n, s=s: iter([{"keys": [f"{s}-{i}"]} for i in range(n)])) for s, n in enumerate([200] + [5] * 40)
    ]
    keys = [c["keys"][0] for c in merged(shards, seed=9)]
    assert sorted(keys) == sorted(f"{s}-{i}" for s, n in enumerate([200] + [5] * 40) for i in range(n))
    large = [at for at, k in enumerate(keys) if k.startswith("0-")]
    assert large[0] < len(keys) // 10 and large[-1] > len(keys) // 2  # read beside the small ones, not in one stretch
    assert large[-1] - large[0] + 1 - len(large) > 50


def test_the_secret_order_of_shards_is_a_permutation_fixed_by_its_seed():
    shards = list(range(50))
    assert sorted(secret_order(shards, 4)) == shards
    assert secret_order(shards, 4) == secret_order(shards, 4) != secret_order(shards, 5)
