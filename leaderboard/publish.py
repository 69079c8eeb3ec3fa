"""Publishing a release to a Hugging Face Hub dataset repo, tagged ``v<N>``.

The repo holds ``results/table.parquet`` (the ``results`` config), ``results/table.csv``,
``records/records.jsonl`` (the release's records, one per line, in arrival order),
``release.json``, ``CHANGELOG.md`` and a dataset card. Given a Space, the release's static site
(:func:`leaderboard.site.build_site`) goes to that Hub Space (``sdk: static``) under the same tag, and
the dataset card links it. Versions are published in order; a published version is never
overwritten. Publishing is idempotent: a rerun after a lost reply or an interruption finds the tag
already set on the same files and succeeds, or uploads what is missing and sets the tag. Both repos
are checked before either is written, the dataset first, so a rerun ends with both tagged.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoFile

from dataset_builder import faults
from dataset_builder.errors import one_line
from leaderboard import per_image
from leaderboard.conflicts import REPLACED
from leaderboard.drilldown import publishable, stored_folder
from leaderboard.errors import LeaderboardError
from leaderboard.release import (
    CHANGELOG,
    RELEASE_JSON,
    changelog,
    list_releases,
    release_dir,
    release_info,
    release_table,
)
from leaderboard.site import build_site
from leaderboard.table import CSV, PARQUET

CARD = (
    """---
configs:
- config_name: results
  data_files:
  - split: train
    path: results/table.parquet
pretty_name: {pretty_name}
tags:
- out-of-distribution-detection
- leaderboard
---
# C-OOD leaderboard: {bench_id} {bench_version}

Version **v{version}** of the class-out-of-distribution detection leaderboard (cood-bench):
{num_entries} (model, kappa) entries, {num_levels} severity levels, benchmark `{bench_id}`
{bench_version}, manifest sha256 `{manifest}`.{site}

```python
import datasets
table = datasets.load_dataset("{repo_id}", "results", revision="v{version}", split="train")
```

- `results/table.parquet`, `results/table.csv`: one row per entry (`ood_auroc_l<i>` is the ood-auroc of level i;"""
    """ level 0 is the easiest).
- `records/records.jsonl`: the validated result records the table is derived from.
- `per_image/<entry_id>.parquet`: an entry's per-image scores, one row per public image (its record's `per_image`
  names the file's sha256; a verified run's file stands for its entry).
- `CHANGELOG.md`: what entered in each version. Every version is a git tag (`v1`, `v2`, ...).
"""
)

SITE_LINK = (
    "\n\nBrowse it on the leaderboard's site, the Hub Space [{space_id}]({url})"
    " (tag `v{version}` holds this version's site)."
)

SPACE_CARD = """---
title: C-OOD leaderboard
emoji: 📊
colorFrom: blue
colorTo: indigo
sdk: static
app_file: index.html
pinned: false
short_description: Class-out-of-distribution detection leaderboard
datasets:
- {repo_id}
tags:
- leaderboard
- out-of-distribution-detection
---
# C-OOD leaderboard: {bench_id} {bench_version}

The static site of version **v{version}** of the class-out-of-distribution detection leaderboard
(cood-bench): {num_entries} (model, kappa) entries. The results and records are the dataset
[{repo_id}]({url}) (tag `v{version}`); the site offers them as `downloads/` and `records/` too.
"""


def publish(
    directory: str | Path,
    repo_id: str,
    version: int | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    space_id: str | None = None,
) -> dict:
    """Upload release ``version`` (default: the latest) to dataset repo ``repo_id`` and tag it ``v<N>``; given
    ``space_id``, also its site to that static Space, tagged ``v<N>`` too, and the dataset card links the Space.

    ``endpoint`` defaults to ``$HF_ENDPOINT``, then the public Hub. Returns ``{"repo_id", "tag", "commit",
    "uploaded"}``, plus ``"space"``: the same four for the Space when one is given; ``uploaded`` is false when the
    tag was already set on the same files (a rerun).
    """
    versions = list_releases(directory)
    if not versions:
        raise LeaderboardError(f"nothing released in {directory}; run `cood-leaderboard release` first")
    version = versions[-1] if version is None else version
    source = release_dir(directory, version)
    tag = f"v{version}"
    api = HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)
    base = api.endpoint.rstrip("/")
    current, results = repo_id, {}
    try:
        with tempfile.TemporaryDirectory() as staging:
            targets = _staged(Path(directory), source, version, repo_id, space_id, base, Path(staging))
            done = []
            for current, repo_type, folder, _ in targets:  # check both before writing either
                api.create_repo(
                    current,
                    repo_type=repo_type,
                    exist_ok=True,
                    **({"space_sdk": "static"} if repo_type == "space" else {}),
                )
                done.append(_published(api, current, repo_type, tag, version, folder))
            for (current, repo_type, folder, point), commit in zip(targets, done):
                uploaded = commit is None
                if uploaded:
                    commit = _upload(api, current, repo_type, folder, point, tag)
                results[repo_type] = {"repo_id": current, "tag": tag, "commit": commit, "uploaded": uploaded}
    except LeaderboardError:
        raise
    except Exception as exc:  # HfHubHTTPError, OSError, and the HTTP client's transport errors
        raise LeaderboardError(f"publishing to {current} failed: {one_line(exc)}") from exc
    return {**results["dataset"], **({"space": results["space"]} if space_id else {})}


def _staged(
    directory: Path, source: Path, version: int, repo_id: str, space_id: str | None, base: str, staging: Path
) -> list[tuple[str, str, Path, str]]:
    """Stage the dataset repo's files, and given ``space_id`` the Space's site, under ``staging``: what to upload, as
    (repo, repo type, folder, the prefix of its fault points)."""
    data, site = staging / "dataset", staging / "space"
    data.mkdir()
    link = SITE_LINK.format(space_id=space_id, url=f"{base}/spaces/{space_id}", version=version) if space_id else ""
    _stage(directory, source, version, repo_id, data, link)
    targets = [(repo_id, "dataset", data, "")]
    if space_id:
        _stage_space(directory, version, repo_id, site, f"{base}/datasets/{repo_id}")
        targets.append((space_id, "space", site, "space-"))
    return targets


def _upload(api: HfApi, repo_id: str, repo_type: str, folder: Path, point: str, tag: str) -> str:
    """Upload ``folder`` to ``repo_id`` and tag the commit ``tag``; the commit. The Space's tree is exactly the site:
    files of an earlier site go."""
    with warnings.catch_warnings():  # the site's downloads are data files in a Space, by design
        warnings.filterwarnings("ignore", "It seems that you are about to commit a data file")
        commit = api.upload_folder(
            folder_path=folder,
            repo_id=repo_id,
            repo_type=repo_type,
            commit_message=f"leaderboard {tag}",
            delete_patterns="*" if repo_type == "space" else None,
        ).oid
    faults.point(f"publish:after-{point}upload")
    api.create_tag(repo_id, tag=tag, repo_type=repo_type, revision=commit, tag_message=f"leaderboard {tag}")
    faults.point(f"publish:after-{point}tag")
    return commit


def _published(api: HfApi, repo_id: str, repo_type: str, tag: str, version: int, staging: Path) -> str | None:
    """The commit ``tag`` already marks in the repo when it holds the staged files, None when it is still to publish;
    an error when the tag holds other files or a later version is out."""
    published = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo_id, repo_type=repo_type).tags}
    if tag in published:
        differ = _differences(api, repo_id, published[tag], staging, repo_type)
        if differ:
            raise LeaderboardError(
                f"{repo_id} already has {tag} with other content ({differ[0]} differs); "
                "a published version is never overwritten"
            )
        return published[tag]
    later = sorted(
        (t for t in published if t.startswith("v") and t[1:].isdigit() and int(t[1:]) > version),
        key=lambda t: int(t[1:]),
    )
    if later:
        raise LeaderboardError(f"{repo_id} already has {later[-1]}; versions are published once and in order")
    return None


def _differences(api: HfApi, repo_id: str, revision: str, staging: Path, repo_type: str = "dataset") -> list[str]:
    """The staged files that ``revision`` of the repo lacks or holds with other bytes."""
    remote = {
        entry.path: entry
        for entry in api.list_repo_tree(repo_id, repo_type=repo_type, revision=revision, recursive=True)
        if isinstance(entry, RepoFile)
    }
    differ = []
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        name, data = path.relative_to(staging).as_posix(), path.read_bytes()
        entry = remote.get(name)
        if entry is None or (
            entry.lfs.sha256 != hashlib.sha256(data).hexdigest()
            if entry.lfs
            else entry.blob_id != hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        ):
            differ.append(name)
    return differ


def _stage(directory: Path, source: Path, version: int, repo_id: str, staging: Path, site: str = "") -> None:
    table = release_table(directory, version)
    info = release_info(directory, version)
    (staging / "results").mkdir()
    (staging / "records").mkdir()
    for name in (PARQUET, CSV):
        (staging / "results" / name).write_bytes((source / name).read_bytes())
    with open(staging / "records" / "records.jsonl", "w") as handle:
        for name in table.sort_values("seq")["record_file"]:
            handle.write(json.dumps(json.loads((directory / name).read_bytes()), separators=(",", ":")) + "\n")
    _stage_per_image(directory, table, staging)
    (staging / RELEASE_JSON).write_bytes((source / RELEASE_JSON).read_bytes())
    (staging / CHANGELOG).write_text(changelog(directory, up_to=version))
    bench = info["benchmark"]
    (staging / "README.md").write_text(
        CARD.format(
            pretty_name=json.dumps(f"C-OOD leaderboard: {bench['id']} {bench['version']}"),
            bench_id=bench["id"],
            bench_version=bench["version"],
            manifest=bench["manifest_sha256"] or "none",
            version=version,
            num_entries=info["num_entries"],
            num_levels=info["num_levels"],
            repo_id=repo_id,
            site=site,
        )
    )


def _stage_per_image(directory: Path, table, staging: Path) -> None:
    """Each entry's per-image file as ``per_image/<entry_id>.parquet``: the file of the record that stands for the
    entry (a verified run's replaces the submitter's; of records in conflict, the latest), where it has one."""
    for row in table[table["conflict"] != REPLACED].sort_values("seq").itertuples():
        record = json.loads((directory / row.record_file).read_bytes())
        name = per_image.name(record)
        path = None if name is None else publishable(stored_folder(directory, row.record_file), record, name)
        if path is not None:
            (staging / "per_image").mkdir(exist_ok=True)
            (staging / "per_image" / f"{row.entry_id}.parquet").write_bytes(path.read_bytes())


def _stage_space(directory: Path, version: int, repo_id: str, staging: Path, dataset_url: str) -> None:
    """The Space of release ``version``: its site (with the raw records and downloads) and the Space's card."""
    build_site(release_table(directory, version), staging, f"v{version}", board=directory)
    info = release_info(directory, version)
    (staging / "README.md").write_text(
        SPACE_CARD.format(
            repo_id=repo_id,
            url=dataset_url,
            bench_id=info["benchmark"]["id"],
            bench_version=info["benchmark"]["version"],
            version=version,
            num_entries=info["num_entries"],
        ),
        encoding="utf-8",
    )
