"""A local stand-in for the Hugging Face Hub's HTTP API, for tests (the real Hub is never reached).

It speaks enough of the API for the real ``huggingface_hub`` and ``datasets`` clients: create a
repo (model, dataset, or Space with its ``sdk``), preupload + NDJSON commit (every file is answered
``uploadMode: regular``, so no LFS or Xet transfer is ever needed), branches and tags, refs, repo info,
commits, tree and paths-info listings, and ``resolve`` downloads (HEAD and GET, with ranges). Storage is
in memory with git semantics: every commit gets a fresh 40-hex sha, branches and tags point at commits, and every
old revision stays readable. Blob ids are git blob hashes, as the Hub's are for regular files.

How tests use it. ``huggingface_hub`` and ``datasets`` read ``HF_ENDPOINT`` (and the cache and
offline settings) when they are first imported, so :func:`reserve_for_session` binds a port and sets the
environment before either is imported: ``tests/conftest.py`` calls it when pytest imports the conftest, before any
test module, and the ``hub_server`` fixture starts serving when a test first asks for it (such tests are marked
``hub``). From then on every Hugging Face client of the test
session, in-process or in a subprocess, talks to this server, and its caches live in a temporary
``HF_HOME``. The ``hub_server`` fixture gives the endpoint URL, e.g. ``HfApi(endpoint=hub_server)``.
Repos persist for the session: give each test its own repo id.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

USER = "cood-tester"
SPACE_SDKS = ("gradio", "streamlit", "docker", "static")
INITIAL_GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.tar filter=lfs diff=lfs merge=lfs -text\n"


def git_blob_id(data: bytes) -> str:
    """The git blob hash of ``data`` (what the Hub reports as a regular file's oid)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubError(Exception):
    """An HTTP error answered the Hub's way: status, ``X-Error-Code`` header, ``{"error": message}``."""

    def __init__(self, status: int, message: str, code: str | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


@dataclass
class Commit:
    sha: str
    parent: str | None
    tree: dict[str, str]  # path -> blob id
    title: str
    message: str
    date: str


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    created: str
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    sdk: str | None = None  # a Space's SDK, given when it is created


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class HubState:
    """All repos, commits and blobs; every method is called under :attr:`lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.blobs: dict[str, bytes] = {}

    def repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            raise HubError(404, f"Repository Not Found for url: {repo_type}s/{repo_id}", "RepoNotFound")
        return repo

    def create_repo(self, repo_type: str, repo_id: str, url: str, sdk: str | None = None) -> Repo:
        if (repo_type, repo_id) in self.repos:
            raise HubError(409, f"You already created this {repo_type} repo", url=url)
        if repo_type == "space" and sdk not in SPACE_SDKS:
            raise HubError(400, f"a Space needs an sdk, one of {', '.join(SPACE_SDKS)} (got {sdk!r})")
        repo = Repo(repo_type, repo_id, _now(), sdk=sdk if repo_type == "space" else None)
        self.repos[(repo_type, repo_id)] = repo
        self.commit(repo, "main", {".gitattributes": INITIAL_GITATTRIBUTES}, [], "initial commit", "", None)
        return repo

    def resolve(self, repo: Repo, revision: str) -> Commit:
        name = revision.removeprefix("refs/heads/").removeprefix("refs/tags/")
        sha = repo.branches.get(name) or repo.tags.get(name) or (revision if revision in repo.commits else None)
        if sha is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo.commits[sha]

    def commit(
        self,
        repo: Repo,
        branch: str,
        additions: dict[str, bytes],
        deletions: list[tuple[str, bool]],
        title: str,
        description: str,
        parent_commit: str | None,
    ) -> Commit:
        head = repo.branches.get(branch)
        if head is None and repo.commits:
            raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
        if parent_commit is not None and parent_commit != head:
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        tree = dict(repo.commits[head].tree) if head else {}
        for path, is_folder in deletions:
            doomed = [p for p in tree if p.startswith(path.rstrip("/") + "/")] if is_folder else [path] * (path in tree)
            if not doomed:
                raise HubError(404, f"{path} does not exist in {branch}", "EntryNotFound")
            for p in doomed:
                del tree[p]
        for path, data in additions.items():
            oid = git_blob_id(data)
            self.blobs[oid] = data
            tree[path] = oid
        sha = hashlib.sha1(f"{repo.repo_id}/{head}/{uuid.uuid4()}".encode()).hexdigest()
        repo.commits[sha] = Commit(sha, head, tree, title, description, _now())
        repo.branches[branch] = sha
        return repo.commits[sha]

    def last_change(self, repo: Repo, commit: Commit, path: str, is_dir: bool) -> Commit:
        """The commit that last changed ``path`` (a file, or everything under a folder) as of ``commit``."""

        def state(c: Commit) -> Any:
            if is_dir:
                return sorted((p, o) for p, o in c.tree.items() if p.startswith(path + "/"))
            return c.tree.get(path)

        here = state(commit)
        while commit.parent is not None and state(repo.commits[commit.parent]) == here:
            commit = repo.commits[commit.parent]
        return commit


def _entry(state: HubState, repo: Repo, commit: Commit, path: str, expand: bool) -> dict | None:
    """A tree / paths-info entry for a file or folder, or None if the path does not exist."""
    if path in commit.tree:
        oid = commit.tree[path]
        entry = {"type": "file", "oid": oid, "size": len(state.blobs[oid]), "path": path}
        is_dir = False
    else:
        inside = sorted((p, o) for p, o in commit.tree.items() if p.startswith(path + "/"))
        if not inside:
            return None
        entry = {
            "type": "directory",
            "oid": hashlib.sha1(json.dumps(inside).encode()).hexdigest(),
            "size": 0,
            "path": path,
        }
        is_dir = True
    if expand:
        last = state.last_change(repo, commit, path, is_dir)
        entry["lastCommit"] = {"id": last.sha, "title": last.title, "date": last.date}
    return entry


def _children(commit: Commit, folder: str, recursive: bool) -> list[str]:
    """Paths (files and folders) under ``folder`` ("" = root): direct children, or all when recursive."""
    prefix = folder + "/" if folder else ""
    found: set[str] = set()
    for path in commit.tree:
        if not path.startswith(prefix):
            continue
        parts = path[len(prefix) :].split("/")
        depth = len(parts) if recursive else 1
        found.update(prefix + "/".join(parts[: k + 1]) for k in range(depth))
    return sorted(found)


_TYPES = "(?P<type>model|dataset|space)s"
_REPO = r"(?P<ns>[^/]+)/(?P<name>[^/]+)"
_ROUTES = [
    ("POST", re.compile(r"^/api/repos/create$"), "create_repo"),
    ("GET", re.compile(r"^/api/whoami-v2$"), "whoami"),
    ("POST", re.compile(r"^/api/validate-yaml$"), "validate_yaml"),
    ("GET", re.compile(rf"^/api/{_TYPES}/{_REPO}(?:/revision/(?P<rev>[^/]+))?$"), "info"),
    ("GET", re.compile(rf"^/api/{_TYPES}/{_REPO}/refs$"), "refs"),
    ("GET", re.compile(rf"^/api/{_TYPES}/{_REPO}/commits/(?P<rev>[^/]+)$"), "commits"),
    ("GET", re.compile(rf"^/api/{_TYPES}/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$"), "tree"),
    ("POST", re.compile(rf"^/api/{_TYPES}/{_REPO}/paths-info/(?P<rev>[^/]+)$"), "paths_info"),
    ("POST", re.compile(rf"^/api/{_TYPES}/{_REPO}/preupload/(?P<rev>[^/]+)$"), "preupload"),
    ("POST", re.compile(rf"^/api/{_TYPES}/{_REPO}/commit/(?P<rev>[^/]+)$"), "commit"),
    ("POST", re.compile(rf"^/api/{_TYPES}/{_REPO}/tag/(?P<rev>[^/]+)$"), "create_tag"),
    ("DELETE", re.compile(rf"^/api/{_TYPES}/{_REPO}/tag/(?P<rev>[^/]+)$"), "delete_tag"),
    ("POST", re.compile(rf"^/api/{_TYPES}/{_REPO}/branch/(?P<rev>[^/]+)$"), "create_branch"),
    ("GET", re.compile(rf"^/(?:(?P<type>dataset|space)s/)?{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
    ("HEAD", re.compile(rf"^/(?:(?P<type>dataset|space)s/)?{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
]


class HubHandler(BaseHTTPRequestHandler):
    """Routes one request to an ``api_<route>`` method under the state lock; errors become Hub errors."""

    protocol_version = "HTTP/1.1"
    server: HubServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = parse_qs(url.query)
        body = self._read_body()
        try:
            for route_method, pattern, name in _ROUTES:
                match = pattern.match(url.path)
                if route_method == method and match:
                    args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                    if "ns" in args:
                        args["repo_id"] = f"{args.pop('ns')}/{args.pop('name')}"
                        args["repo_type"] = args.pop("type", "model")
                    with self.server.state.lock:
                        getattr(self, f"api_{name}")(body=body, **args)
                    return
            raise HubError(404, f"no route for {method} {url.path}")
        except HubError as exc:
            headers = {"X-Error-Message": exc.message.encode("ascii", "backslashreplace").decode()}
            if exc.code:
                headers["X-Error-Code"] = exc.code
            self._send(exc.status, {"error": exc.message, **exc.extra}, headers, head=method == "HEAD")
        except Exception as exc:
            self._send(500, {"error": f"local Hub failed: {exc!r}"}, head=method == "HEAD")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, payload: Any, headers: dict | None = None, head: bool = False) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        headers = {"Content-Type": "application/json", **(headers or {})}
        headers.setdefault("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _json(self, body: bytes) -> dict:
        try:
            return json.loads(body or b"{}")
        except json.JSONDecodeError:
            raise HubError(400, "request body is not JSON") from None

    @property
    def state(self) -> HubState:
        return self.server.state

    def _url(self, repo_type: str, repo_id: str) -> str:
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        return f"{self.server.url}/{prefix}{repo_id}"

    # ------------------------------------------------------------------ routes

    def api_create_repo(self, body: bytes) -> None:
        payload = self._json(body)
        repo_type = payload.get("type") or "model"
        if not payload.get("organization") or not payload.get("name"):
            raise HubError(400, "this test Hub wants repo ids of the form namespace/name")
        repo_id = f"{payload['organization']}/{payload['name']}"
        self.state.create_repo(repo_type, repo_id, self._url(repo_type, repo_id), payload.get("sdk"))
        self._send(200, {"url": self._url(repo_type, repo_id), "name": repo_id, "id": repo_id})

    def api_whoami(self, body: bytes) -> None:
        self._send(
            200,
            {
                "type": "user",
                "name": USER,
                "fullname": USER,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": "write"}},
            },
        )

    def api_validate_yaml(self, body: bytes) -> None:
        content = self._json(body).get("content", "")
        match = re.match(r"^---\n(.*?)\n---(\n|$)", content, re.DOTALL)
        try:
            metadata = yaml.safe_load(match[1]) if match else {}
        except yaml.YAMLError as exc:
            raise HubError(400, "Invalid YAML", errors=[{"message": f"YAML: {exc}"}]) from None
        if not isinstance(metadata, (dict, type(None))):
            raise HubError(400, "Invalid YAML", errors=[{"message": "the metadata is not a YAML mapping"}])
        self._send(200, {"errors": [], "warnings": []})

    def api_info(self, body: bytes, repo_type: str, repo_id: str, rev: str = "main") -> None:
        repo = self.state.repo(repo_type, repo_id)
        commit = self.state.resolve(repo, rev)
        siblings = [
            {"rfilename": path, "size": len(self.state.blobs[oid]), "blobId": oid}
            for path, oid in sorted(commit.tree.items())
        ]
        self._send(
            200,
            {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "author": repo_id.split("/")[0],
                "sha": commit.sha,
                "lastModified": commit.date,
                "createdAt": repo.created,
                "private": False,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
                **({"sdk": repo.sdk} if repo.sdk else {}),
            },
        )

    def api_refs(self, body: bytes, repo_type: str, repo_id: str) -> None:
        repo = self.state.repo(repo_type, repo_id)

        def refs(kind: str, table: dict[str, str]) -> list[dict]:
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": sha} for n, sha in sorted(table.items())]

        self._send(
            200,
            {
                "branches": refs("heads", repo.branches),
                "tags": refs("tags", repo.tags),
                "converts": [],
                "pullRequests": [],
            },
        )

    def api_commits(self, body: bytes, repo_type: str, repo_id: str, rev: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        commit: Commit | None = self.state.resolve(repo, rev)
        history = []
        while commit is not None:
            history.append(
                {
                    "id": commit.sha,
                    "title": commit.title,
                    "message": commit.message,
                    "date": commit.date,
                    "authors": [{"user": USER, "avatar": ""}],
                }
            )
            commit = repo.commits[commit.parent] if commit.parent else None
        self._send(200, history)

    def api_tree(self, body: bytes, repo_type: str, repo_id: str, rev: str, path: str = "") -> None:
        repo = self.state.repo(repo_type, repo_id)
        commit = self.state.resolve(repo, rev)
        path = path.strip("/")
        if path and (path in commit.tree or _entry(self.state, repo, commit, path, False) is None):
            raise HubError(404, f"{path} is not a folder in {rev}", "EntryNotFound")
        recursive = self.query.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = self.query.get("expand", ["false"])[0].lower() in ("1", "true")
        entries = [_entry(self.state, repo, commit, p, expand) for p in _children(commit, path, recursive)]
        self._send(200, entries)

    def api_paths_info(self, body: bytes, repo_type: str, repo_id: str, rev: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        commit = self.state.resolve(repo, rev)
        form = parse_qs(body.decode())
        expand = form.get("expand", ["false"])[0].lower() in ("1", "true")
        entries = [_entry(self.state, repo, commit, p.strip("/"), expand) for p in form.get("paths", [])]
        self._send(200, [e for e in entries if e is not None])

    def api_preupload(self, body: bytes, repo_type: str, repo_id: str, rev: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        tree = self.state.resolve(repo, rev).tree if rev in repo.branches else {}
        files = [
            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": tree.get(f["path"])}
            for f in self._json(body).get("files", [])
        ]
        self._send(200, {"files": files})

    def api_commit(self, body: bytes, repo_type: str, repo_id: str, rev: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        if self.query.get("create_pr"):
            raise HubError(400, "this test Hub does not do pull requests")
        if rev not in repo.branches:
            raise HubError(404, f"Invalid rev id: {rev} (commits go to a branch)", "RevisionNotFound")
        header: dict = {}
        additions: dict[str, bytes] = {}
        deletions: list[tuple[str, bool]] = []
        for line in body.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
            elif key == "file":
                additions[value["path"]] = (
                    base64.b64decode(value["content"])
                    if value.get("encoding") == "base64"
                    else value["content"].encode()
                )
            elif key in ("deletedFile", "deletedFolder"):
                deletions.append((value["path"], key == "deletedFolder"))
            else:
                raise HubError(422, f"this test Hub does not accept {key!r} operations (preupload answers 'regular')")
        commit = self.state.commit(
            repo,
            rev,
            additions,
            deletions,
            header.get("summary", ""),
            header.get("description", ""),
            header.get("parentCommit"),
        )
        self._send(
            200,
            {
                "success": True,
                "commitOid": commit.sha,
                "commitUrl": f"{self._url(repo_type, repo_id)}/commit/{commit.sha}",
                "hookOutput": "",
                "pullRequestUrl": None,
            },
        )

    def api_create_tag(self, body: bytes, repo_type: str, repo_id: str, rev: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        tag = self._json(body).get("tag")
        if not tag:
            raise HubError(400, "no tag name")
        if tag in repo.tags:
            raise HubError(409, f"Tag {tag} already exists")
        repo.tags[tag] = self.state.resolve(repo, rev).sha
        self._send(200, {})

    def api_delete_tag(self, body: bytes, repo_type: str, repo_id: str, rev: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        if repo.tags.pop(rev, None) is None:
            raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        self._send(200, {})

    def api_create_branch(self, body: bytes, repo_type: str, repo_id: str, rev: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        if rev in repo.branches:
            raise HubError(409, f"Branch {rev} already exists")
        repo.branches[rev] = self.state.resolve(repo, self._json(body).get("startingPoint") or "main").sha
        self._send(200, {})

    def api_resolve(self, body: bytes, repo_type: str, repo_id: str, rev: str, path: str) -> None:
        repo = self.state.repo(repo_type, repo_id)
        commit = self.state.resolve(repo, rev)
        if path not in commit.tree:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        oid = commit.tree[path]
        data = self.state.blobs[oid]
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": commit.sha,
            "ETag": f'"{oid}"',
            "Accept-Ranges": "bytes",
        }
        status = 200
        wanted = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if wanted and (wanted[1] or wanted[2]):
            start, end = (
                (int(wanted[1]), int(wanted[2] or len(data) - 1))
                if wanted[1]
                else (len(data) - int(wanted[2]), len(data) - 1)
            )
            start, end = max(start, 0), min(end, len(data) - 1)
            if start > end:
                raise HubError(416, f"range {self.headers['Range']} outside a {len(data)}-byte file")
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start : end + 1], 206
        self._send(status, data, headers, head=self.command == "HEAD")


class HubServer(ThreadingHTTPServer):
    """The server on 127.0.0.1 (a free port), its state, and its base URL."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), HubHandler)
        self.state = HubState()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> HubServer:
        """Serve from a thread (once; later calls return the running server)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.serve_forever, name="local-hub", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for the serving loop
            self.shutdown()
        self.server_close()


def client_env(url: str, home: str) -> dict[str, str]:
    """The environment that points Hugging Face clients at ``url`` with caches under ``home``."""
    return {
        "HF_ENDPOINT": url,
        "HF_HOME": home,
        "HF_HUB_CACHE": os.path.join(home, "hub"),
        "HF_DATASETS_CACHE": os.path.join(home, "datasets"),
        "HF_TOKEN": "hf_local_test_token",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_ETAG_TIMEOUT": "30",
        "HF_HUB_DOWNLOAD_TIMEOUT": "30",
    }


def reserve_for_session() -> HubServer:
    """A server bound to a free port, not yet serving (:meth:`HubServer.start`), with this process's (and its
    children's) Hugging Face clients pointed at it.

    Must run before ``huggingface_hub`` or ``datasets`` is imported (they read the endpoint then); stopped and cleaned
    at exit.
    """
    early = [name for name in ("huggingface_hub", "datasets") if name in sys.modules]
    if early:
        raise RuntimeError(
            f"{', '.join(early)} imported before the local Hub was set up; it would talk to the real Hub"
        )
    server = HubServer()
    home = tempfile.mkdtemp(prefix="cood-hf-home-")
    os.environ.update(client_env(server.url, home))
    atexit.register(shutil.rmtree, home, True)
    atexit.register(server.stop)
    return server


def start_for_session() -> HubServer:
    """:func:`reserve_for_session`, serving at once (for scripts)."""
    return reserve_for_session().start()
