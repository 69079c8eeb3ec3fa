"""Publish a built benchmark folder to a Hugging Face Hub dataset repo, resumably, and tag the version.

The folder is compared with the repo's ``main`` branch file by file (size, then the git blob
hash or, for LFS files, the sha256), and only what differs is uploaded, in batches of commits.
An interrupted publish therefore resumes where it stopped when run again, and publishing an
already published folder uploads nothing. ``manifest.json`` and ``README.md`` go in the last
commit, together with the deletion of remote files the folder no longer has, so ``main`` never
shows a manifest whose shards are missing. Then the tag (the benchmark version) is set on that
commit. A tag is never moved: publishing different files under an existing tag is an error.

The dataset card is uploaded written afresh for the repo (:func:`dataset_builder.card.published_card`):
its loading examples name the repo id and the tag. The local folder is left as it is (the card is
not part of the manifest's sha256). A ``README.md`` that cood-bench did not write is uploaded as it is.
The private part (``private/``) is never uploaded: the public manifest names it by sha256 only.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.hf_api import RepoFile

from dataset_builder.errors import BenchmarkError
from dataset_builder.manifest import MANIFEST, load_manifest
from dataset_builder.private import FOLDER as PRIVATE_FOLDER

log = logging.getLogger(__name__)

LAST = (MANIFEST, "README.md")  # committed last: they describe the files before them
KEEP_REMOTE = (".gitattributes",)  # the Hub's own file; never deleted
BATCH_FILES = 500
BATCH_BYTES = 4 << 30


@dataclass(frozen=True)
class RemoteFile:
    """What the Hub tells about a file: its size, its git blob id, and its sha256 when it is in LFS."""

    size: int
    blob_id: str
    lfs_sha256: str | None = None


def local_files(folder: Path) -> dict[str, Path]:
    """``path in repo -> file`` for every file of the folder, except hidden ones, ``*.partial`` leftovers and the
    private part (``private/``, never published: :mod:`dataset_builder.private`)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts[0] == PRIVATE_FOLDER:
            continue
        if path.is_file() and not any(p.startswith(".") for p in relative.parts) and path.suffix != ".partial":
            files[relative.as_posix()] = path
    return files


def _digest(content: Path | bytes, algorithm: str, prefix: bytes = b"") -> str:
    digest = hashlib.new(algorithm, prefix)
    if isinstance(content, bytes):
        digest.update(content)
        return digest.hexdigest()
    with open(content, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _size(content: Path | bytes) -> int:
    return len(content) if isinstance(content, bytes) else content.stat().st_size


def is_published(content: Path | bytes, remote: RemoteFile | None) -> bool:
    """Whether the remote file has exactly the bytes of ``content`` (a file, or bytes to upload)."""
    if remote is None or remote.size != _size(content):
        return False
    if remote.lfs_sha256 is not None:
        return _digest(content, "sha256") == remote.lfs_sha256
    return _digest(content, "sha1", b"blob %d\0" % remote.size) == remote.blob_id


def _upload(content: Path | bytes) -> str | bytes:
    return content if isinstance(content, bytes) else str(content)


def batches(paths: list[str], sizes: dict[str, int], max_files: int, max_bytes: int) -> list[list[str]]:
    """Consecutive groups of ``paths`` with at most ``max_files`` files and ``max_bytes`` bytes (or one file)."""
    groups: list[list[str]] = []
    total = 0
    for path in paths:
        if not groups or len(groups[-1]) >= max_files or (groups[-1] and total + sizes[path] > max_bytes):
            groups.append([])
            total = 0
        groups[-1].append(path)
        total += sizes[path]
    return groups


def remote_files(api: HfApi, repo_id: str, revision: str) -> dict[str, RemoteFile]:
    """Every file of the repo at ``revision``."""
    return {
        entry.path: RemoteFile(entry.size, entry.blob_id, entry.lfs.sha256 if entry.lfs else None)
        for entry in api.list_repo_tree(repo_id, repo_type="dataset", revision=revision, recursive=True)
        if isinstance(entry, RepoFile)
    }


def publish(
    folder: Path | str,
    repo_id: str,
    *,
    tag: str,
    endpoint: str | None = None,
    token: str | None = None,
    revision_message: str | None = None,
    private: bool = False,
    batch_files: int = BATCH_FILES,
    batch_bytes: int = BATCH_BYTES,
) -> str:
    """Upload what ``main`` lacks of the benchmark folder, tag the result ``tag``; return the tagged commit sha."""
    from dataset_builder.card import published_card

    folder = Path(folder)
    load_manifest(folder)  # a benchmark folder, with a manifest this version reads
    message = revision_message or f"cood-bench benchmark {tag}"
    files: dict[str, Path | bytes] = dict(local_files(folder))
    card = published_card(folder, repo_id, tag)
    if card is not None:
        files["README.md"] = card
    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)

    tagged = {t.name: t.target_commit for t in api.list_repo_refs(repo_id, repo_type="dataset").tags}
    if tag in tagged:
        remote = remote_files(api, repo_id, tagged[tag])
        differ = sorted(p for p in files if not is_published(files[p], remote.get(p)))
        differ += sorted(set(remote) - set(files) - set(KEEP_REMOTE))
        if differ:
            raise BenchmarkError(
                f"{repo_id} tag {tag} already holds other files ({len(differ)}, e.g. {differ[0]}); tags are never moved"
            )
        return tagged[tag]

    head = api.dataset_info(repo_id, revision="main").sha
    remote = remote_files(api, repo_id, head)
    missing = [p for p in files if not is_published(files[p], remote.get(p))]
    stale = sorted(set(remote) - set(files) - set(KEEP_REMOTE))
    first = [p for p in missing if p not in LAST]
    groups = batches(first, {p: _size(files[p]) for p in first}, batch_files, batch_bytes)
    groups.append([p for p in LAST if p in missing])
    for number, group in enumerate(groups, 1):
        operations = [CommitOperationAdd(path_in_repo=p, path_or_fileobj=_upload(files[p])) for p in group]
        if number == len(groups):
            operations += [CommitOperationDelete(path_in_repo=p) for p in stale]
        if not operations:
            continue
        log.info("%s: commit %d/%d, %d files", repo_id, number, len(groups), len(operations))
        head = api.create_commit(
            repo_id,
            operations=operations,
            commit_message=f"{message} ({number}/{len(groups)})",
            repo_type="dataset",
            parent_commit=head,
        ).oid
    api.create_tag(repo_id, tag=tag, tag_message=message, revision=head, repo_type="dataset")
    return head
