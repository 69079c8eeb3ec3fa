"""The request queue: evaluation requests in a Hub dataset repo, claimed and run by the leaderboard's workers.

The requests repo holds ``queue.json`` (the benchmark revision and level count of the leaderboard it feeds, written
by :func:`init_queue`) and one file per request, ``requests/<id>.json``, whose ``status`` goes ``pending`` ->
``running`` (claimed by one worker) -> ``done`` or ``failed`` (with a one-line ``reason``).

Every change is a commit made on top of the revision it was read at (``parent_commit``): the Hub refuses it when
anything was committed in between, and the writer reads again and retries. So two workers never claim the same
request, and no update overwrites another.

A request names a model the harness can build without running anyone's code: a model-zoo kind the harness registers
(the entry points :mod:`dataset_builder.zoo_groups` reads, without importing the harness), as ``timm:<name>``
with a weights file from a Hub model repo, or, for a folder kind, as ``hf:<owner>/<name>``, a model repo saved with
``save_pretrained``. The revision is pinned to a commit when the request is made, and the weights are checked at once.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import HfHubHTTPError

from dataset_builder.errors import one_line
from dataset_builder.zoo_groups import registered_kinds
from leaderboard import store
from leaderboard.errors import LeaderboardError
from leaderboard.record import REPO_ID
from leaderboard.schema import revision
from leaderboard.weights_check import WEIGHT_SUFFIXES, check_weights_file

QUEUE_JSON = "queue.json"
FOLDER = "requests"
STATUSES = ("pending", "running", "done", "failed")
HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
MAX_TRIES = 30  # commits refused because another writer got there first, before giving up
REFUSED = (409, 412)  # what the Hub answers a commit whose parent is no longer the head


def hub_api(endpoint: str | None = None, token: str | None = None) -> HfApi:
    """The Hub client (``endpoint`` defaults to ``$HF_ENDPOINT``, then the public Hub)."""
    return HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _hub_error(what: str, exc: Exception) -> LeaderboardError:
    return LeaderboardError(f"{what} failed: {one_line(exc)}")


def _read_json(api: HfApi, repo_id: str, path: str, rev: str) -> dict:
    with open(api.hf_hub_download(repo_id, path, repo_type="dataset", revision=rev)) as handle:
        return json.load(handle)


def _head(api: HfApi, repo_id: str) -> tuple[str, list[str]]:
    info = api.dataset_info(repo_id, revision="main")
    return info.sha, [s.rfilename for s in info.siblings or []]


def _commit_if(api: HfApi, repo_id: str, parent: str, files: dict[str, dict], message: str) -> bool:
    """Commit ``files`` (path -> JSON) on top of ``parent``; False when the Hub refused it because the head moved."""
    operations = [
        CommitOperationAdd(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        for path, data in files.items()
    ]
    try:
        api.create_commit(repo_id, operations, commit_message=message, repo_type="dataset", parent_commit=parent)
    except HfHubHTTPError as exc:
        if exc.response is not None and exc.response.status_code in REFUSED:
            return False
        raise
    return True


def init_queue(repo_id: str, board: str | Path, api: HfApi) -> dict:
    """Create (or check) the requests repo for the leaderboard in ``board``; return its ``queue.json``."""
    config = store.load_config(board)
    queue = {"benchmark": revision(config["benchmark"]), "num_levels": config["num_levels"]}
    try:
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True)
        for _ in range(MAX_TRIES):
            head, files = _head(api, repo_id)
            if QUEUE_JSON in files:
                there = _read_json(api, repo_id, QUEUE_JSON, head)
                if there != queue:
                    raise LeaderboardError(
                        f"{repo_id} is the queue of another leaderboard (benchmark "
                        f"{there['benchmark']['id']} {there['benchmark']['version']}, manifest "
                        f"{there['benchmark']['manifest_sha256']})"
                    )
                return there
            if _commit_if(api, repo_id, head, {QUEUE_JSON: queue}, "request queue"):
                return queue
    except HfHubHTTPError as exc:
        raise _hub_error(f"creating the request queue {repo_id}", exc) from exc
    raise LeaderboardError(f"{repo_id}: too many concurrent writers; try again")


def read_queue(api: HfApi, repo_id: str) -> dict:
    """The queue's ``queue.json``; a one-line error when ``repo_id`` is no request queue."""
    try:
        return _read_json(api, repo_id, QUEUE_JSON, "main")
    except HfHubHTTPError as exc:
        raise LeaderboardError(
            f"{repo_id} is no request queue (run `cood-leaderboard queue-init` first): {one_line(exc)}"
        ) from exc


def zoo_kinds() -> dict[str, bool]:
    """The model-zoo kinds the installed harness registers, in name order, each with whether its target is its own Hub
    repo (else it needs --weights and --file)."""
    return dict(sorted((name, own_repo) for name, own_repo, _ in registered_kinds()))


def target_usage() -> str:
    """The kinds as help and errors list them: ``timm:<name> (with --weights and --file) or hf:<owner>/<name> ...``."""
    kinds = zoo_kinds()
    with_file = ", ".join(f"{kind}:<name>" for kind, own_repo in kinds.items() if not own_repo)
    own = ", ".join(f"{kind}:<owner>/<name>" for kind, own_repo in kinds.items() if own_repo)
    return " or ".join(
        filter(None, [with_file and f"{with_file} (with --weights and --file)", own and f"{own} (a model repo)"])
    )


def parse_target(target: str, weights: str | None, file: str | None) -> dict:
    """Check a request's model reference before anything is fetched: the target kind, the repo ids, the file format."""
    kind, sep, name = target.partition(":")
    kinds = zoo_kinds()
    if not sep or kind not in kinds or not name:
        raise LeaderboardError(
            f"target {target!r}: give {target_usage()}; a submission file is never run from a request"
        )
    if kinds[kind]:
        if weights is not None or file is not None:
            raise LeaderboardError(
                f"target {target!r} is its own Hub repo ({kind}:<owner>/<name>); drop --weights and --file"
            )
        if not REPO_ID.match(name):
            raise LeaderboardError(f"target {target!r}: {kind}: takes a Hub model repo id, {kind}:<owner>/<name>")
        return {"target": target, "repo": name, "file": None}
    if weights is None or file is None:
        raise LeaderboardError(
            f"{kind}: targets need --weights <owner>/<name> (a Hub model repo) and --file "
            f"(the weights file in it, {' or '.join(WEIGHT_SUFFIXES)})"
        )
    if not REPO_ID.match(weights):
        raise LeaderboardError(f"--weights {weights!r}: not a Hub model repo id (<owner>/<name>)")
    if not file.endswith(WEIGHT_SUFFIXES) or file.startswith("/") or ".." in file.split("/"):
        raise LeaderboardError(f"--file {file!r}: a weights file in the repo, {' or '.join(WEIGHT_SUFFIXES)}")
    return {"target": target, "repo": weights, "file": file}


def fetch_weights(api: HfApi, request: dict) -> Path:
    """Download a request's weights (a folder kind's repo snapshot, or the weights file) at its pinned commit; check the
    weights file's sha256 against the request's. Returns the file, or the snapshot folder."""
    model = request["model"]
    if model["file"] is None:
        folder = Path(api.snapshot_download(model["repo"], revision=model["revision"]))
        path = folder / model["weights_file"]
    else:
        folder = None
        path = Path(api.hf_hub_download(model["repo"], model["file"], revision=model["revision"]))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != model["weights_sha256"]:
        raise LeaderboardError(
            f"{model['repo']}@{model['revision']}: the weights' sha256 {digest[:12]} is not the "
            f"requested {model['weights_sha256'][:12]}"
        )
    return folder if folder is not None else path


def make_request(
    api: HfApi,
    repo_id: str,
    target: str,
    weights: str | None = None,
    file: str | None = None,
    rev: str = "main",
    name: str | None = None,
    kappas: list[str] | None = None,
) -> dict:
    """Validate a request at once (target kind, repo and revision, weights format, the queue's benchmark revision) and
    add it as ``pending``; return it. The same model at the same commit with the same kappas is requested once."""
    model = parse_target(target, weights, file)
    queue = read_queue(api, repo_id)
    try:
        info = api.model_info(model["repo"], revision=rev, files_metadata=False)
    except HfHubHTTPError as exc:
        raise _hub_error(f"looking up {model['repo']}@{rev}", exc) from exc
    files = {s.rfilename for s in info.siblings or []}
    if model["file"] is None:
        found = [f for f in HF_WEIGHTS if f in files]
        if "config.json" not in files or not found:
            raise LeaderboardError(
                f"{model['repo']}@{info.sha[:12]} is no transformers model repo (needs config.json "
                f"and {' or '.join(HF_WEIGHTS)})"
            )
        model["weights_file"] = found[0]
    elif model["file"] not in files:
        raise LeaderboardError(f"{model['repo']}@{info.sha[:12]} has no file {model['file']}")
    model["revision"] = info.sha
    try:
        path = Path(api.hf_hub_download(model["repo"], model.get("weights_file") or model["file"], revision=info.sha))
    except HfHubHTTPError as exc:
        raise _hub_error(f"downloading the weights of {model['repo']}", exc) from exc
    model["weights_format"] = check_weights_file(path)
    model["weights_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    default_name = model["repo"].split("/")[1]
    request = {
        "model": model,
        "name": name or default_name,
        "kappas": sorted(set(kappas or [])),
        "benchmark": queue["benchmark"],
        "num_levels": queue["num_levels"],
    }
    identity = json.dumps({k: request[k] for k in ("model", "kappas", "benchmark")}, sort_keys=True)
    request = {
        "id": hashlib.sha256(identity.encode()).hexdigest()[:12],
        **request,
        "status": "pending",
        "requested": _now(),
    }
    path = f"{FOLDER}/{request['id']}.json"
    for _ in range(MAX_TRIES):
        head, present = _head(api, repo_id)
        if path in present:
            there = _read_json(api, repo_id, path, head)
            raise LeaderboardError(f"already requested as {request['id']} (status {there['status']})")
        if _commit_if(api, repo_id, head, {path: request}, f"request {request['id']}: {target}"):
            return request
    raise LeaderboardError(f"{repo_id}: too many concurrent writers; try again")


def list_requests(api: HfApi, repo_id: str) -> tuple[str, list[dict]]:
    """The queue's head commit and its requests, oldest first."""
    head, files = _head(api, repo_id)
    requests = [_read_json(api, repo_id, f, head) for f in files if f.startswith(f"{FOLDER}/") and f.endswith(".json")]
    return head, sorted(requests, key=lambda r: (r["requested"], r["id"]))


def claim(api: HfApi, repo_id: str, worker: str) -> dict | None:
    """Take the oldest pending request for ``worker`` (status ``running``), or None when none is pending. Atomic: the
    claim is a commit on top of the revision the request was read at, so of two workers only one gets it."""
    for _ in range(MAX_TRIES):
        head, requests = list_requests(api, repo_id)
        pending = [r for r in requests if r["status"] == "pending"]
        if not pending:
            return None
        taken = {**pending[0], "status": "running", "worker": worker, "claimed": _now()}
        if _commit_if(api, repo_id, head, {f"{FOLDER}/{taken['id']}.json": taken}, f"claim {taken['id']} ({worker})"):
            return taken
    raise LeaderboardError(f"{repo_id}: could not claim a request in {MAX_TRIES} tries (too many workers)")


def finish(api: HfApi, repo_id: str, request: dict, status: str, **fields) -> dict:
    """Mark a claimed request ``done``, ``failed`` (with ``reason``) or back to ``pending``; return it as written."""
    if status not in STATUSES:
        raise ValueError(status)
    path = f"{FOLDER}/{request['id']}.json"
    for _ in range(MAX_TRIES):
        head, _ = _head(api, repo_id)
        there = _read_json(api, repo_id, path, head)
        if there.get("worker") != request.get("worker") or there["status"] != "running":
            raise LeaderboardError(f"request {request['id']} is no longer this worker's (status {there['status']})")
        updated = {**there, "status": status, "finished": _now(), **fields}
        if status == "pending":
            updated = {k: v for k, v in updated.items() if k not in ("worker", "claimed", "finished")}
        if _commit_if(api, repo_id, head, {path: updated}, f"{status} {request['id']}"):
            return updated
    raise LeaderboardError(f"{repo_id}: could not mark request {request['id']} {status} in {MAX_TRIES} tries")
