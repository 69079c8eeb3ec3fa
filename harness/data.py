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
    return sample["__key__"], transform(image), label_of[class_id]


def _collate(examples: list) -> dict:
    keys, images, labels = zip(*examples)
    return {"keys": list(keys), "images": torch.stack(images), "labels": torch.tensor(labels, dtype=torch.int64)}


def split_batches(benchmark: Benchmark, split: str, transform: Callable, channels: int, label_of: dict[str, int],
                  batch_size: int = 256, workers: int = 2, shards: list[dict] | None = None) -> Iterator[dict]:
    """Batches ``{"keys", "images", "labels"}`` of one split; ``label_of`` maps class ids to label indices.

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
        .batched(batch_size, collation_fn=_collate, partial=True)
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers,
                                         pin_memory=torch.cuda.is_available(), persistent_workers=False)
    return iter(loader)
