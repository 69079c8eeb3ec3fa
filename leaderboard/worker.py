"""The request worker: claim a pending request, evaluate it, add its records as verified, release and republish.

The evaluation itself comes from the ``cood_bench.evaluators`` entry point (the harness registers ``harness``), so
the leaderboard needs no torch until a worker runs. Workers sharing a leaderboard directory take turns for the
add-release-publish step (a file lock), so releases are published in order; the claim itself is atomic on the Hub
(:func:`leaderboard.requests.claim`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from filelock import FileLock
from huggingface_hub import HfApi

from dataset_builder.console import plural
from dataset_builder.errors import one_line
from leaderboard import publish as hub
from leaderboard import release as releases
from leaderboard import requests as queue
from leaderboard import store
from leaderboard.errors import LeaderboardError
from leaderboard.schema import revision

EVALUATORS = "cood_bench.evaluators"
TURN_LOCK = ".worker.lock"


def load_evaluator(name: str = "harness"):
    """The evaluator class registered under ``name``; a one-line error when it (or torch under it) is missing."""
    found = [e for e in entry_points(group=EVALUATORS) if e.name == name]
    if not found:
        raise LeaderboardError(
            f"no evaluator {name!r} is installed (entry point group {EVALUATORS}); pip install 'cood-bench[torch]'"
        )
    try:
        return found[0].load()
    except ImportError as exc:
        raise LeaderboardError(f"the worker needs the torch extra ({exc}): pip install 'cood-bench[torch]'") from exc


@dataclass
class Worker:
    """One worker: the queue it serves, the leaderboard it adds to, where it publishes, and its evaluator."""

    api: HfApi
    requests_repo: str
    board: Path
    evaluator: object  # has .identity (the benchmark revision) and .evaluate(request, weights) -> (records, folder)
    publish_repo: str | None = None
    space_id: str | None = None
    name: str = socket.gethostname()
    log: Callable[[str], None] = print

    def check(self) -> None:
        """The queue, the leaderboard and the evaluator's benchmark must be the same revision."""
        wanted = queue.read_queue(self.api, self.requests_repo)["benchmark"]
        board = revision(store.load_config(self.board)["benchmark"])
        for what, have in (("the leaderboard", board), ("the worker's benchmark", self.evaluator.identity)):
            if have != wanted:
                raise LeaderboardError(
                    f"{what} is {have['id']} {have['version']} (manifest {have['manifest_sha256']}), "
                    f"but {self.requests_repo} takes requests for manifest {wanted['manifest_sha256']}"
                )

    def serve_one(self) -> dict | None:
        """Claim and run one request; return it as finally written, or None when none is pending."""
        request = queue.claim(self.api, self.requests_repo, self.name)
        if request is None:
            return None
        self.log(f"claimed {request['id']} ({request['model']['target']}, {request['name']})")
        try:
            records, folder = self.evaluator.evaluate(request, queue.fetch_weights(self.api, request))
        except KeyboardInterrupt:
            queue.finish(self.api, self.requests_repo, request, "pending")
            raise
        except Exception as exc:  # any failure of the request's own model or data is the request's outcome
            return self._finish(request, "failed", reason=one_line(exc)[:500])
        verified = {"request": request["id"], "requests_repo": self.requests_repo, "worker": self.name}
        with FileLock(self.board / TURN_LOCK):
            try:
                entries = store.add_records(self.board, records, folder=folder, verified=verified)
            except LeaderboardError as exc:
                return self._finish(request, "failed", reason=one_line(exc)[:500])
            info = releases.release(self.board, note=f"request {request['id']}: {request['name']} (verified)")
            published = None
            if self.publish_repo is not None:
                try:
                    published = hub.publish(
                        self.board,
                        self.publish_repo,
                        endpoint=self.api.endpoint,
                        token=self.api.token,
                        space_id=self.space_id,
                    )["tag"]
                except LeaderboardError as exc:
                    return self._finish(
                        request,
                        "failed",
                        entries=entries,
                        release=info["version"],
                        reason=f"added as v{info['version']}, but publishing failed: {exc}",
                    )
        return self._finish(request, "done", entries=entries, release=info["version"], published=published)

    def _finish(self, request: dict, status: str, **fields) -> dict:
        written = queue.finish(self.api, self.requests_repo, request, status, **fields)
        self.log(
            f"{status} {request['id']}"
            + (
                f": {fields['reason']}"
                if "reason" in fields
                else f": {plural(len(fields.get('entries', [])), 'entry', 'entries')} in v{fields.get('release')}"
            )
        )
        return written

    def run(self, max_requests: int | None = None, poll_s: float = 0.0) -> list[dict]:
        """Serve requests until none is pending (``poll_s`` 0) or ``max_requests`` are served; poll every ``poll_s``
        seconds otherwise. Returns the requests served."""
        self.check()
        served = []
        while max_requests is None or len(served) < max_requests:
            outcome = self.serve_one()
            if outcome is not None:
                served.append(outcome)
            elif poll_s > 0:
                time.sleep(poll_s)
            else:
                break
        return served
