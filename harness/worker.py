"""The harness side of the leaderboard's request worker: evaluate one request's model on the pinned benchmark.

Registered as the ``cood_bench.evaluators`` entry point ``harness``, which ``cood-leaderboard worker`` loads (the
leaderboard never imports the harness). Requests name library models only (the zoo kinds of :mod:`harness.zoo`)
with weights data, never a submission file, and weights load with ``weights_only``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.benchmarks import open_benchmark
from harness.config import SUBMIT_DEFAULTS
from harness.errors import HarnessError
from harness.run import submit
from harness.zoo import kinds_listed, zoo_kind


class RequestEvaluator:
    """Evaluates requests on one benchmark, on one device, writing each run under ``work_dir/<request id>``."""

    def __init__(
        self,
        benchmark: str | Path,
        device: str = SUBMIT_DEFAULTS.device,
        work_dir: str | Path = "cood-worker",
        batch_size: int = SUBMIT_DEFAULTS.batch_size,
        progress: bool = SUBMIT_DEFAULTS.progress,
    ):
        self.work_dir = Path(work_dir)
        self.config = replace(
            SUBMIT_DEFAULTS, benchmark=benchmark, device=device, batch_size=batch_size, progress=progress
        )
        self.identity = open_benchmark(benchmark, progress=progress).identity()

    def evaluate(self, request: dict, weights: Path) -> tuple[list[dict], Path]:
        """The records of ``request`` (its model with the downloaded ``weights``: a file, or the snapshot
        folder of a folder kind such as ``hf:``) and the run folder their per-class files are in."""
        if request["benchmark"] != self.identity:
            raise HarnessError(
                f"request {request['id']} is for benchmark manifest {request['benchmark']['manifest_sha256'][:12]}, "
                f"this worker's is {self.identity['manifest_sha256'][:12]}"
            )
        target = request["model"].get("target")
        kind = zoo_kind(target) if isinstance(target, str) and "\n" not in target else None
        if kind is None:
            raise HarnessError(
                f"request {request['id']} names {str(target)[:80]!r}, not a library model "
                f"({kinds_listed()}); the worker never runs a file from the queue"
            )
        target, weights_file = (f"{kind.name}:{weights}", None) if kind.folder else (target, str(weights))
        out = self.work_dir / request["id"]
        evaluation = submit(
            target,
            self.config,
            weights=weights_file,
            name=request["name"],
            kappas=request["kappas"] or None,
            num_levels=request["num_levels"],
            out=out,
        )
        return evaluation.records, out
