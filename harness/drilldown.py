"""The per-OOD-class drill-down of a run: the sidecar table, the thumbnails and each record's ``per_class`` summary.

Paths in a record's ``per_class`` are relative to the run's output folder (the folder that holds ``records/``)::

    per_class/per_class.parquet          one row per (kappa, level, class); level null for a class no level holds
    per_class/thumbnails/<index>-<k>.*   a few test images of each class a record lists (the benchmark's own
                                         bytes when small enough, else a small JPEG)
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import pandas as pd
from PIL import Image

from dataset_builder.benchmark import Benchmark
from dataset_builder.errors import BenchmarkError
from dataset_builder.shards import iter_samples
from harness.errors import HarnessError
from harness.method.evaluation import KappaResult
from harness.method.per_class import class_metrics, class_rows, hardest_indices, level_summaries
from harness.method.scores import SplitScores

SIDECAR = "per_class/per_class.parquet"
THUMBNAILS = "per_class/thumbnails"
THUMBNAILS_PER_CLASS = 3
THUMBNAIL_PIXELS = 64  # longest side; larger images are downscaled
COLUMNS = ["kappa", "level", "class_id", "class_index", "name", "n", "ood_auroc", "mean_confidence"]


@dataclass
class PerClass:
    """A run's drill-down: the sidecar table, each kappa's ``per_class`` record field and the thumbnails' bytes."""

    table: pd.DataFrame
    summaries: dict[str, dict]
    thumbnails: dict[str, bytes]

    def write(self, folder: Path) -> None:
        """Write the sidecar and thumbnails under ``folder`` (a run's new output folder)."""
        (folder / THUMBNAILS).mkdir(parents=True, exist_ok=True)
        self.table.to_parquet(folder / SIDECAR, index=False)
        for relative, data in self.thumbnails.items():
            (folder / relative).write_bytes(data)


def per_class(results: list[KappaResult], id_test: SplitScores, ood_test: SplitScores, bench: Benchmark) -> PerClass:
    """Every kappa's per-class ood-auroc and mean confidence on the test split, with thumbnails of the listed
    classes."""
    classes = bench.ood_classes
    ids = classes["id"].astype(str).tolist()
    names = [str(n) if isinstance(n, str) and n else i for i, n in zip(ids, classes.get("name", classes["id"]))]
    frames, metrics = [], {}
    for result in results:
        metrics[result.kappa] = class_metrics(
            id_test.scores[result.kappa],
            ood_test.scores[result.kappa],
            ood_test.confs[result.kappa],
            ood_test.labels,
            len(ids),
        )
        rows = pd.DataFrame(class_rows(result.levels.classes, metrics[result.kappa]))
        rows.insert(0, "kappa", result.kappa)
        rows["class_id"] = [ids[c] for c in rows["class_index"]]
        rows["name"] = [names[c] for c in rows["class_index"]]
        frames.append(rows)
    table = pd.concat(frames, ignore_index=True)[COLUMNS].astype({"level": "Int64"})
    listed = sorted(set().union(*(hardest_indices(r.levels.classes, metrics[r.kappa]) for r in results)))
    images = thumbnails(bench, [ids[c] for c in listed])
    files = {c: {f"{THUMBNAILS}/{c}-{k}.{ext}": data for k, (ext, data) in enumerate(images[ids[c]])} for c in listed}
    summaries = {
        r.kappa: {
            "file": SIDECAR,
            "levels": level_summaries(
                r.levels.classes, metrics[r.kappa], ids, names, {c: list(files[c]) for c in listed}
            ),
        }
        for r in results
    }
    return PerClass(table, summaries, {path: data for paths in files.values() for path, data in paths.items()})


def thumbnails(
    bench: Benchmark, class_ids: list[str], count: int = THUMBNAILS_PER_CLASS
) -> dict[str, list[tuple[str, bytes]]]:
    """The first ``count`` test images of each class as ``(extension, bytes)``; none for a class without its own test
    shard (the benchmark then gives no image access by class)."""
    shards = {s["class_id"]: s for s in bench.shards("ood_test") if s.get("class_id") is not None}
    out = {}
    for class_id in class_ids:
        shard = shards.get(class_id)
        if shard is None:
            out[class_id] = []
            continue
        try:
            samples = list(islice(iter_samples(bench.shard_path(shard)), count))
            out[class_id] = [
                _small(sample[bench.image_ext], bench.image_ext, bench.max_image_pixels) for sample in samples
            ]
        except (BenchmarkError, KeyError, OSError, ValueError) as exc:
            raise HarnessError(f"cannot read thumbnails of class {class_id} from {shard['path']}: {exc}") from exc
    return out


def _small(data: bytes, ext: str, max_pixels: int) -> tuple[str, bytes]:
    """A small image: the benchmark's bytes when already small, else a downscaled JPEG."""
    image = Image.open(io.BytesIO(data))
    if image.width * image.height > max_pixels:
        raise ValueError(f"an image of {image.width}x{image.height} pixels exceeds the benchmark's max_image_pixels")
    if max(image.size) <= THUMBNAIL_PIXELS and ext in ("png", "jpg", "jpeg"):
        return ext, data
    image = image.convert("RGB")
    image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=85)
    return "jpg", buffer.getvalue()
