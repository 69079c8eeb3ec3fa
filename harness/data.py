"""Streaming a benchmark split from its WebDataset shards into batches for the model."""

from __future__ import annotations

import functools
from typing import Callable, Iterator

import torch
import webdataset as wds
from PIL import Image

from dataset_builder.benchmark import Benchmark


def _to_example(sample: dict, image_ext: str, transform: Callable, channels: int, label_of: dict[str, int]):
    image = sample[image_ext]
    image = image.convert("L" if channels == 1 else "RGB")
    class_id = sample["json"]["class_id"]
    if class_id not in label_of:
        raise ValueError(f"sample {sample['__key__']} has class '{class_id}', which is not in this split's class list")
    return sample["__url__"], sample["__key__"], transform(image), label_of[class_id]


def _collate(examples: list) -> dict:
    urls, keys, images, labels = zip(*examples)
    return {"shard": urls[0], "keys": list(keys), "images": torch.stack(images), "labels": torch.tensor(labels, dtype=torch.int64)}


def batches_within_shards(examples: Iterator[tuple], batch_size: int) -> Iterator[dict]:
    """Batches that never span two shards, so that a batch's content depends on its shard and the batch
    size alone (not on the number of workers): stochastic kappas and resumed runs stay reproducible."""
    batch: list = []
    for example in examples:
        if batch and (len(batch) == batch_size or example[0] != batch[0][0]):
            yield _collate(batch)
            batch = []
        batch.append(example)
    if batch:
        yield _collate(batch)


def split_batches(benchmark: Benchmark, split: str, transform: Callable, channels: int, label_of: dict[str, int],
                  batch_size: int = 256, workers: int = 2, shards: list[dict] | None = None) -> Iterator[dict]:
    """Batches ``{"shard", "keys", "images", "labels"}`` of one split; ``label_of`` maps class ids to label indices.

    ``shards`` restricts the stream to some of the split's shards (the default is all of them).
    """
    shards = benchmark.shards(split) if shards is None else shards
    urls = [str(benchmark.shard_path(s)) for s in shards]
    if not urls:
        return iter(())
    workers = max(0, min(workers, len(urls)))
    dataset = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False, nodesplitter=None,
                       workersplitter=wds.split_by_worker if workers > 1 else None)
        .decode("pil")
        .map(functools.partial(_to_example, image_ext=benchmark.image_ext, transform=transform, channels=channels, label_of=label_of))
        .compose(functools.partial(batches_within_shards, batch_size=batch_size))
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers,
                                         pin_memory=torch.cuda.is_available(), persistent_workers=False)
    return iter(loader)
