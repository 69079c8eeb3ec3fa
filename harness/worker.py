"""The harness side of the leaderboard's request worker: evaluate one request's model on the pinned benchmark.

Registered as the ``cood_bench.evaluators`` entry point ``harness``, which ``cood-leaderboard worker`` loads (the
leaderboard never imports the harness). Requests name library models only (the zoo kinds of :mod:`harness.zoo`)
with weights data, never a submission file, and weights load with ``weights_only``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.benchmarks import open_benchmark, with_private
from harness.config import SUBMIT_DEFAULTS
from harness.errors import HarnessError
from harness.run import submit
from harness.zoo import kinds_listed, zoo_kind
from leaderboard.record import FORMATS

REQUEST_ID = FORMATS["request_id"][0]


class RequestEvaluator:
    """Evaluates requests on one benchmark, on one device, writing each run under ``work_dir/<request id>`` (an id of
    the request id rule, never a path out of it); every run scores the benchmark's private part too (from
    ``private_part``, by default ``<benchmark>/private``) when its manifest names one, and a worker without it is
    refused at the start."""

    def __init__(
        self,
        benchmark: str | Path,
        device: str = SUBMIT_DEFAULTS.device,
        work_dir: str | Path = "cood-worker",
        batch_size: int = SUBMIT_DEFAULTS.batch_size,
        progress: bool = SUBMIT_DEFAULTS.progress,
        private_part: str | Path | None = None,
    ):
        self.work_dir = Path(work_dir).absolute()
        bench = open_benchmark(benchmark, progress=progress)
        private = bench.has_private_part or private_part is not None
        with_private(bench, private, private_part)  # refused here, in one line, when it is not there
        self.config = replace(
            SUBMIT_DEFAULTS,
            benchmark=benchmark,
            device=device,
            batch_size=batch_size,
            progress=progress,
            private=private,
            private_part=private_part,
        )
        self.identity = bench.identity()

    def evaluate(self, request: dict, weights: Path) -> tuple[list[dict], Path]:
        """The records of ``request`` (its model with the downloaded ``weights``: a file, or the snapshot
        folder of a folder kind such as ``hf:``) and the run folder their per-class files are in."""
        if not isinstance(request.get("id"), str) or not REQUEST_ID.fullmatch(request["id"]):
            raise HarnessError("the request's id is not a request id (12 hex digits); nothing was run")
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
        try:
            evaluation = submit(
                target,
                self.config,
                weights=weights_file,
                name=request["name"],
                kappas=request["kappas"] or None,
                num_levels=request["num_levels"],
                out=out,
            )
        except HarnessError as exc:  # named by the requested repo, not by where the worker keeps its download
            raise HarnessError(str(exc).replace(str(weights), _downloaded(request["model"], kind.folder))) from exc
        return evaluation.records, out


def _downloaded(model: dict, folder: bool) -> str:
    """What a request's downloaded weights are, in words: its repo at its commit, or its file there."""
    at = f"{model.get('repo')}@{str(model.get('revision'))[:12]}"
    return at if folder else f"{model.get('file') or model.get('weights_file')} of {at}"
