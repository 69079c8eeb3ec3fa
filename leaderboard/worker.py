"""The request worker: claim a pending request, evaluate it, add its records as verified, release and republish.

The evaluation itself comes from the ``cood_bench.evaluators`` entry point (the harness registers ``harness``), so
the leaderboard needs no torch until a worker runs. Workers sharing a leaderboard directory take turns for the
add-release-publish step (a file lock), so releases are published in order; the claim itself is atomic on the Hub
(:func:`leaderboard.requests.claim`), and a file of the queue that is no request is answered ``failed`` there.

A failure's reason is public (it is written to the queue), so it quotes nothing of the worker's disk
(:func:`public_reason`); the worker's log has the full message.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from filelock import FileLock
from huggingface_hub import HfApi

from dataset_builder.console import plural
from dataset_builder.errors import BenchmarkError, CoodError, one_line
from leaderboard import publish as hub
from leaderboard import release as releases
from leaderboard import requests as queue
from leaderboard import store
from leaderboard.errors import LeaderboardError
from leaderboard.schema import revision

EVALUATORS = "cood_bench.evaluators"
TURN_LOCK = ".worker.lock"
LOCAL_PATH = re.compile(r"(?<![\w./:~-])/[^\s'\"]*[^\s'\".,:;)\]]")  # an absolute path in a message
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")  # a hash or a prefix of one


def public_reason(exc: BaseException, request: dict) -> str:
    """A failed request's reason as the queue publishes it, in one line: a project error's message with every absolute
    path written ``<local path>`` and every hash the request's own text does not hold ``<hash>``; a benchmark error (the
    worker's data) or any other error by its type alone, since its message may quote the worker's files."""
    if not isinstance(exc, CoodError) or isinstance(exc, BenchmarkError):
        return f"the evaluation failed on the worker ({type(exc).__name__}); the worker's log has the details"
    own = json.dumps(request)
    text = LOCAL_PATH.sub("<local path>", one_line(exc))
    text = HEX.sub(lambda m: m[0] if m[0] in own else "<hash>", text)
    return text[: queue.MAX_REASON]


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

    def __post_init__(self) -> None:
        self.board = Path(self.board).absolute()  # so that a message naming its files names an absolute path

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
        """Claim and run one request (or answer a file that is none); return it as finally written, or None when none
        is waiting."""
        request = queue.claim(self.api, self.requests_repo, self.name, queue.queue_of(self.board))
        if request is None:
            return None
        if request["status"] == "failed":
            self.log(request["reason"])
            return request
        self.log(f"claimed {request['id']} ({request['model']['target']}, {request['name']})")
        try:
            records, folder = self.evaluator.evaluate(request, queue.fetch_weights(self.api, request))
        except KeyboardInterrupt:
            queue.finish(self.api, self.requests_repo, request, "pending")
            raise
        except Exception as exc:  # any failure of the request's own model or data is the request's outcome
            return self._failed(request, exc)
        verified = {"request": request["id"], "requests_repo": self.requests_repo, "worker": self.name}
        with FileLock(self.board / TURN_LOCK):
            try:
                entries = store.add_records(self.board, records, folder=folder, verified=verified)
            except LeaderboardError as exc:
                return self._failed(request, exc)
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
                    return self._failed(
                        request,
                        exc,
                        f"added as v{info['version']}, but publishing failed: ",
                        entries=entries,
                        release=info["version"],
                    )
        return self._finish(request, "done", entries=entries, release=info["version"], published=published)

    def _failed(self, request: dict, exc: Exception, prefix: str = "", **fields) -> dict:
        """Mark ``request`` failed with the public reason of ``exc``; the log also has its full message."""
        reason = prefix + public_reason(exc, request)
        if reason != prefix + one_line(exc):
            self.log(f"{request['id']} failed on this worker with {one_line(exc)}")
        return self._finish(request, "failed", **fields, reason=reason[: queue.MAX_REASON])

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
