"""The request queue: evaluation requests in a Hub dataset repo, claimed and run by the leaderboard's workers.

The requests repo holds ``queue.json`` (the benchmark revision and level count of the leaderboard it feeds, written
by :func:`init_queue`) and one file per request, ``requests/<id>.json``, whose ``status`` goes ``pending`` ->
``running`` (claimed by one worker) -> ``done`` or ``failed`` (with a one-line ``reason``).

Anyone who can request can commit to the repo, so the worker reads its files as data: a pending file is served only
when it is a request :func:`make_request` makes (:func:`check_request`: an id of the id rule naming its file, a
weights file of the requested repo, ...); any other is refused, marked ``failed`` in the same claim, and never served.

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
from leaderboard.record import FORMATS, MAX_NAME_BYTES, NOT_NAMES, REPO_ID
from leaderboard.schema import revision
from leaderboard.weights_check import WEIGHT_SUFFIXES, check_weights_file

QUEUE_JSON = "queue.json"
FOLDER = "requests"
STATUSES = ("pending", "running", "done", "failed")
HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
MAX_TRIES = 30  # commits refused because another writer got there first, before giving up
REFUSED = (409, 412)  # what the Hub answers a commit whose parent is no longer the head
REQUEST_ID = FORMATS["request_id"][0]  # the first 12 hex digits of the sha256 of the request's identity
RELATIVE_PATH = FORMATS["relative_path"][0]
COMMIT, SHA256 = FORMATS["commit"][0], FORMATS["sha256"][0]
MAX_REQUEST_BYTES = 64 * 1024  # a request file is a few hundred bytes; a larger one is never downloaded
MAX_KAPPAS = 64
MAX_REASON = 500  # characters of a failure's reason


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


def _head(api: HfApi, repo_id: str) -> tuple[str, dict[str, int | None]]:
    """The head commit and its files, each with its size (None where the Hub gives none)."""
    info = api.dataset_info(repo_id, revision="main", files_metadata=True)
    return info.sha, {s.rfilename: s.size for s in info.siblings or []}


def request_path(request_id: str) -> str:
    """The file of a request in the queue: ``requests/<id>.json``."""
    return f"{FOLDER}/{request_id}.json"


def shown(text: str, limit: int = 120) -> str:
    """Text read from the queue as at most ``limit`` characters of one line a terminal cannot act on (every
    unprintable character written as its Python escape)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])[:limit]


def _read_request(api: HfApi, repo_id: str, path: str, rev: str, size: int | None = None) -> object:
    """A request file's JSON, or None when it is over :data:`MAX_REQUEST_BYTES` or no JSON."""
    if size is not None and size > MAX_REQUEST_BYTES:
        return None
    with open(api.hf_hub_download(repo_id, path, repo_type="dataset", revision=rev), "rb") as handle:
        data = handle.read(MAX_REQUEST_BYTES + 1)
    try:
        return None if len(data) > MAX_REQUEST_BYTES else json.loads(data)
    except (ValueError, RecursionError):
        return None


def _request_files(api: HfApi, repo_id: str, head: str, files: dict[str, int | None]) -> list[tuple[str, object]]:
    """``(path, JSON or None)`` of each ``requests/**.json`` file at ``head`` (a path of the relative-path rule)."""
    return [
        (path, _read_request(api, repo_id, path, head, size))
        for path, size in sorted(files.items())
        if path.startswith(f"{FOLDER}/") and path.endswith(".json") and RELATIVE_PATH.fullmatch(path)
    ]


def _age(item: tuple[str, object]) -> tuple[str, str]:
    path, request = item
    return (str(request.get("requested", "")) if isinstance(request, dict) else "", path)


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


def queue_of(board: str | Path) -> dict:
    """The ``queue.json`` of a queue that feeds the leaderboard in ``board``: its benchmark revision, level count."""
    config = store.load_config(board)
    return {"benchmark": revision(config["benchmark"]), "num_levels": config["num_levels"]}


def init_queue(repo_id: str, board: str | Path, api: HfApi) -> dict:
    """Create (or check) the requests repo for the leaderboard in ``board``; return its ``queue.json``."""
    queue = queue_of(board)
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
        if not REPO_ID.fullmatch(name):
            raise LeaderboardError(f"target {target!r}: {kind}: takes a Hub model repo id, {kind}:<owner>/<name>")
        return {"target": target, "repo": name, "file": None}
    if weights is None or file is None:
        raise LeaderboardError(
            f"{kind}: targets need --weights <owner>/<name> (a Hub model repo) and --file "
            f"(the weights file in it, {' or '.join(WEIGHT_SUFFIXES)})"
        )
    if not REPO_ID.fullmatch(weights):
        raise LeaderboardError(f"--weights {weights!r}: not a Hub model repo id (<owner>/<name>)")
    if not file.endswith(WEIGHT_SUFFIXES) or not RELATIVE_PATH.fullmatch(file):
        raise LeaderboardError(f"--file {file!r}: a weights file in the repo, {' or '.join(WEIGHT_SUFFIXES)}")
    return {"target": target, "repo": weights, "file": file}


def check_request(path: str, request: object, queue: dict) -> dict:
    """``request``, read from ``path`` of the queue, when it is one :func:`make_request` makes for ``queue`` (its
    ``queue.json``): an id of the id rule that names its file, a target :func:`parse_target` takes with the repo and
    file it names (a folder kind: ``weights_file`` one of :data:`HF_WEIGHTS`), a pinned commit and sha256, a name,
    kappas, and the queue's benchmark revision and level count. A one-line ``refused <path>: ...`` otherwise, which
    quotes of the request only its checked id or, escaped, the value :func:`parse_target` refused."""

    def refused(why: str) -> LeaderboardError:
        return LeaderboardError(f"refused {shown(path)}: {why}")

    if not isinstance(request, dict):
        raise refused(f"not a JSON object of at most {MAX_REQUEST_BYTES // 1024} KiB")
    request_id = request.get("id")
    if not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id):
        raise refused("its id is not a request id (12 hex digits)")
    if path != request_path(request_id):
        raise refused(f"its id {request_id} is not its file's name ({request_path('<id>')})")
    model = request.get("model")
    if not isinstance(model, dict) or not all(
        isinstance(model.get(k), str) for k in ("target", "repo", "revision", "weights_sha256")
    ):
        raise refused("its model lacks a target, repo, revision or weights_sha256")
    own_repo = zoo_kinds().get(model["target"].partition(":")[0])
    file = model.get("file")
    if not isinstance(file, (str, type(None))):
        raise refused("its model's file is not a path")
    try:
        wanted = parse_target(model["target"], None if own_repo else model["repo"], file)
    except LeaderboardError as exc:
        raise refused(shown(str(exc), 200)) from None
    if model["repo"] != wanted["repo"]:
        raise refused("its model repo is not its target's")
    if own_repo and model.get("weights_file") not in HF_WEIGHTS:
        raise refused(f"its weights_file is none of {', '.join(HF_WEIGHTS)}, the files of its repo it may name")
    if not own_repo and model.get("weights_file") is not None:
        raise refused("a weights_file beside its file")
    if not COMMIT.fullmatch(model["revision"]) or not SHA256.fullmatch(model["weights_sha256"]):
        raise refused("its revision is not a commit sha or its weights_sha256 not a sha256")
    name = request.get("name")
    if not _text(name, MAX_NAME_BYTES) or name in NOT_NAMES or "/" in name or "\\" in name:
        raise refused(f"its name is not a model name (printable, at most {MAX_NAME_BYTES} bytes, no / or \\)")
    kappas = request.get("kappas")
    if not isinstance(kappas, list) or len(kappas) > MAX_KAPPAS or not all(_text(k, 200) for k in kappas):
        raise refused(f"its kappas are not a list of at most {MAX_KAPPAS} kappa names")
    if request.get("benchmark") != queue["benchmark"] or request.get("num_levels") != queue["num_levels"]:
        raise refused("it is not for the queue's benchmark revision and level count")
    if not isinstance(request.get("num_levels"), int) or not isinstance(request.get("requested"), str):
        raise refused("its num_levels is not an integer or its requested time not a string")
    return request


def _text(value: object, limit: int) -> bool:
    """Whether ``value`` is a printable string of 1 to ``limit`` UTF-8 bytes."""
    return isinstance(value, str) and value.isprintable() and 0 < len(value.encode()) <= limit


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_weights(api: HfApi, request: dict) -> Path:
    """Download a request's weights file from its repo at its pinned commit (never any other path) and check its sha256
    against the request's; return it, or, for a folder kind, the repo's snapshot at that commit."""
    model = request["model"]
    repo, commit = model["repo"], model["revision"]
    try:
        path = Path(api.hf_hub_download(repo, model["file"] or model["weights_file"], revision=commit))
        if _sha256(path) != model["weights_sha256"]:
            raise LeaderboardError(f"{repo}@{commit}: its weights file is not the requested one (another sha256)")
        return path if model["file"] is not None else Path(api.snapshot_download(repo, revision=commit))
    except HfHubHTTPError as exc:
        raise _hub_error(f"downloading the weights of {repo}@{commit}", exc) from exc


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
    _pin(api, model, rev)
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
    path = request_path(request["id"])
    check_request(path, request, queue)  # what a worker would refuse is refused now
    for _ in range(MAX_TRIES):
        head, present = _head(api, repo_id)
        if path in present:
            there = _read_request(api, repo_id, path, head, present[path])
            raise LeaderboardError(f"already requested as {request['id']} (status {_status(there)})")
        if _commit_if(api, repo_id, head, {path: request}, f"request {request['id']}: {target}"):
            return request
    raise LeaderboardError(f"{repo_id}: too many concurrent writers; try again")


def _pin(api: HfApi, model: dict, rev: str) -> None:
    """Pin a request's ``model`` to the commit ``rev`` names: its revision, weights file (a transformers repo's), the
    weights' format and sha256, after checking that the repo holds the files it needs."""
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
    model["weights_sha256"] = _sha256(path)


def _status(request: object) -> str:
    return shown(str(request.get("status")), 20) if isinstance(request, dict) else "unreadable"


def list_requests(api: HfApi, repo_id: str) -> tuple[str, list[dict]]:
    """The queue's head commit and its requests (the files that hold a JSON object), oldest first."""
    head, files = _head(api, repo_id)
    found = [(p, r) for p, r in _request_files(api, repo_id, head, files) if isinstance(r, dict)]
    return head, [r for _, r in sorted(found, key=_age)]


def listing_line(request: dict) -> str:
    """A request as one line of the queue's listing: id, status, name, target, and its reason, release or worker."""
    model = request.get("model") if isinstance(request.get("model"), dict) else {}
    release = request.get("release")
    detail = request.get("reason") or (f"v{release}" if release else request.get("worker", ""))

    def cell(value: object, limit: int = 80) -> str:
        return shown(str(value if value is not None else "-"), limit)

    return (
        f"  {cell(request.get('id'), 12)}  {cell(request.get('status'), 8):<8} {cell(request.get('name')):<24} "
        f"{cell(model.get('target')):<28} {cell(detail, MAX_REASON)}"
    ).rstrip()


def _waiting(request: object) -> bool:
    """Whether a request file is still to be answered: pending, or no request in a status of the queue."""
    return not isinstance(request, dict) or request.get("status") == "pending" or request.get("status") not in STATUSES


def claim(api: HfApi, repo_id: str, worker: str, queue: dict | None = None) -> dict | None:
    """Take the oldest request file waiting for an answer for ``worker``, or None when none is. A request
    :func:`check_request` takes for ``queue`` (the worker's board's :func:`queue_of`; by default the repo's
    ``queue.json``) becomes ``running``; any other file is answered ``failed`` with the refusal as its reason (and its
    fields kept), never to be served. Atomic: the claim is a commit on top of the revision the file was read at, so of
    two workers only one gets it."""
    queue = queue or read_queue(api, repo_id)
    for _ in range(MAX_TRIES):
        head, files = _head(api, repo_id)
        waiting = sorted(((p, r) for p, r in _request_files(api, repo_id, head, files) if _waiting(r)), key=_age)
        if not waiting:
            return None
        path, found = waiting[0]
        try:
            taken = check_request(path, found, queue)
        except LeaderboardError as exc:
            kept = found if isinstance(found, dict) else {}
            taken = {**kept, "status": "failed", "worker": worker, "finished": _now(), "reason": str(exc)[:MAX_REASON]}
            message = f"refuse {shown(path)} ({worker})"
        else:
            taken = {**taken, "status": "running", "worker": worker, "claimed": _now()}
            message = f"claim {taken['id']} ({worker})"
        if _commit_if(api, repo_id, head, {path: taken}, message):
            return taken
    raise LeaderboardError(f"{repo_id}: could not claim a request in {MAX_TRIES} tries (too many workers)")


def finish(api: HfApi, repo_id: str, request: dict, status: str, **fields) -> dict:
    """Mark a request this worker claimed ``done``, ``failed`` (with ``reason``) or back to ``pending``; return it as
    written (the request as claimed, whatever its file holds since)."""
    if status not in STATUSES:
        raise ValueError(status)
    path = request_path(request["id"])
    for _ in range(MAX_TRIES):
        head, files = _head(api, repo_id)
        there = _read_request(api, repo_id, path, head, files.get(path)) if path in files else None
        if (
            not isinstance(there, dict)
            or there.get("worker") != request.get("worker")
            or there.get("status") != "running"
        ):
            raise LeaderboardError(f"request {request['id']} is no longer this worker's (status {_status(there)})")
        updated = {**request, "status": status, "finished": _now(), **fields}
        if status == "pending":
            updated = {k: v for k, v in updated.items() if k not in ("worker", "claimed", "finished")}
        if _commit_if(api, repo_id, head, {path: updated}, f"{status} {request['id']}"):
            return updated
    raise LeaderboardError(f"{repo_id}: could not mark request {request['id']} {status} in {MAX_TRIES} tries")
