"""ImageNet from the Hub's WebDataset repositories (``hf://datasets/<namespace>/<name>[@<revision>][/<shard glob>]``).

The layout followed is the one timm's repositories document and their shard writers produce:

- ``timm/imagenet-22k-wds`` (fall11) and ``timm/imagenet-w21-wds`` (winter21): shards
  ``imagenet22k-{train,validation}-NNNN.tar`` etc.; a sample is ``<key>.jpg``, ``<key>.cls`` and ``<key>.json`` with
  ``class_name`` (the wnid), ``label``, ``width``, ``height``; the key is the original file's stem
  (``n01440764_10026``);
- ``timm/imagenet-1k-wds``: ``imagenet1k-{train,validation}-NN.tar``; the json has ``filename``
  (``n01440764/ILSVRC2012_val_00000293.JPEG``), ``label``, ``width``, ``height``.

A sample's class is the json's ``class_name``, else the folder of its ``filename``; its image name (the key of the
seeded split) is the base name of ``filename``, else the key plus ``.JPEG``, the extension of every file of the
ImageNet releases, so that the split is the one the official release gives. The integer ``label`` is not used: it
indexes a class list that differs between repositories. The image is the sample's ``jpg``, ``jpeg``, ``png`` or
``webp`` member. The glob picks shards (``imagenet1k-validation-*.tar`` for ImageNet-1K validation); without one every
``.tar`` of the repository is read (timm's 22K validation split holds images the train split lacks).

The revision is pinned to its commit when the source is opened. Shards are fetched with ``hf_hub_download`` into the
Hugging Face cache (resumable, kept for the next build); the indexing pass reads each shard's tar headers and json
records in a process pool, and the build then reads each kept image by seeking into its shard.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tarfile
from contextlib import nullcontext

from dataset_builder.errors import BenchmarkError
from dataset_builder.hub_answer import silent_hub
from dataset_builder.sources import Member, MemberSource
from dataset_builder.workers import worker_pool

IMAGE_FIELDS = ("jpg", "jpeg", "png", "webp")
WNID = re.compile(r"^n\d{8}$")
# The URL form HfFileSystem and datasets use; parsed here because the revision is pinned through HfApi before any read.
URL = re.compile(r"^hf://datasets/(?P<repo>[^/@]+/[^/@]+)(?:@(?P<revision>[^/]+))?(?:/(?P<glob>.+))?$")


def parse_url(url: str) -> tuple[str, str, str]:
    """``(repo id, revision, shard glob)`` of an ``hf://datasets/...`` URL."""
    match = URL.match(url)
    if not match:
        raise BenchmarkError(f"{url} is not hf://datasets/<namespace>/<name>[@<revision>][/<shard glob>]")
    return match["repo"], match["revision"] or "main", match["glob"] or "*.tar"


def sample_class(record: dict, key: str, where: str) -> tuple[str, str]:
    """``(class id, image name)`` of a sample from its json record (see the module docstring)."""
    filename = record.get("filename", "")
    class_id = record.get("class_name") or (filename.rsplit("/", 1)[0] if "/" in filename else "")
    if not WNID.match(str(class_id)):
        raise BenchmarkError(f"{where}: sample {key} names no wnid class (json class_name, or filename <wnid>/<file>)")
    return class_id, filename.rsplit("/", 1)[-1] if filename else f"{key}.JPEG"


def index_shard(task: tuple[str, str, str, frozenset | None]) -> tuple[list[str], dict[str, dict[str, Member]]]:
    """Fetch one shard and index it: the classes it holds, and ``class -> {name: (file, offset, size)}`` of the kept
    ones."""
    from huggingface_hub import hf_hub_download
    from webdataset.tariterators import base_plus_ext

    repo, revision, filename, keep = task
    path = hf_hub_download(repo, filename, repo_type="dataset", revision=revision)
    where = f"hf://datasets/{repo}@{revision}/{filename}"
    samples: dict[str, dict] = {}
    try:
        with tarfile.open(path, "r:") as tar:
            for info in tar:
                split = base_plus_ext(info.name) if info.isfile() else None
                if split is None:
                    continue
                key, ext = split
                sample = samples.setdefault(key, {})
                if ext == "json":
                    sample["json"] = json.loads(tar.extractfile(info).read())
                elif ext in IMAGE_FIELDS:
                    sample["image"] = (path, info.offset_data, info.size)
    except (tarfile.TarError, EOFError, json.JSONDecodeError) as exc:
        raise BenchmarkError(f"{where} is damaged ({exc})") from exc
    seen, kept = set(), {}
    for key, sample in samples.items():
        if "json" not in sample or "image" not in sample:
            raise BenchmarkError(
                f"{where}: sample {key} lacks its {'json' if 'json' not in sample else 'image'} member"
            )
        class_id, name = sample_class(sample["json"], key, where)
        seen.add(class_id)
        if keep is None or class_id in keep:
            images = kept.setdefault(class_id, {})
            if name in images:
                raise BenchmarkError(f"{where}: two samples of class {class_id} are named {name}")
            images[name] = sample["image"]
    return sorted(seen), kept


def hub_source(url: str, keep: set[str] | None, workers: int = 2) -> MemberSource:
    """Index the shards ``url`` names (pinned to the revision's commit); ``keep``: the classes whose images are kept."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    repo, revision, pattern = parse_url(url)
    silent_hub(url)
    api = HfApi()
    try:
        sha = api.dataset_info(repo, revision=revision).sha
        files = sorted(
            f for f in api.list_repo_files(repo, repo_type="dataset", revision=sha) if fnmatch.fnmatch(f, pattern)
        )
    except HfHubHTTPError as exc:
        raise BenchmarkError(f"{url}: {str(exc).splitlines()[0]}") from exc
    if not files:
        raise BenchmarkError(f"{url}: no shard of {repo}@{sha} matches {pattern}")
    tasks = [(repo, sha, f, None if keep is None else frozenset(keep)) for f in files]
    members: dict[str, dict[str, Member]] = {}
    seen: set[str] = set()
    with worker_pool(min(workers, len(tasks))) if workers > 1 else nullcontext() as pool:
        for classes, kept in map(index_shard, tasks) if pool is None else pool.imap(index_shard, tasks):
            seen.update(classes)
            for class_id, images in kept.items():
                both = members.setdefault(class_id, {})
                clash = both.keys() & images.keys()
                if clash:
                    raise BenchmarkError(f"{url}: two samples of class {class_id} are named {min(clash)}")
                both.update(images)
    for class_id in seen - members.keys():
        members[class_id] = {}  # present, not kept: listed by classes(), never read
    return MemberSource(f"hf://datasets/{repo}@{sha}/{pattern}", members, "hub_webdataset", sha)
