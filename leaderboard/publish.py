"""Publishing a release to a Hugging Face Hub dataset repo, tagged ``v<N>``.

The repo holds ``results/table.parquet`` (the ``results`` config), ``results/table.csv``,
``records/records.jsonl`` (the release's records, one per line, in arrival order),
``release.json``, ``CHANGELOG.md`` and a dataset card. Versions are published in order; a
published version is never overwritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from huggingface_hub import HfApi

from leaderboard.errors import LeaderboardError
from leaderboard.release import CHANGELOG, RELEASE_JSON, changelog, list_releases, release_dir, release_info, release_table
from leaderboard.table import CSV, PARQUET

CARD = """---
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
{bench_version}, manifest sha256 `{manifest}`.

```python
import datasets
table = datasets.load_dataset("{repo_id}", "results", revision="v{version}", split="train")
```

- `results/table.parquet`, `results/table.csv`: one row per entry (`ood_auroc_l<i>` is the ood-auroc of level i; level 0 is the easiest).
- `records/records.jsonl`: the validated result records the table is derived from.
- `CHANGELOG.md`: what entered in each version. Every version is a git tag (`v1`, `v2`, ...).
"""


def publish(directory: str | Path, repo_id: str, version: int | None = None, endpoint: str | None = None,
            token: str | None = None) -> dict:
    """Upload release ``version`` (default: the latest) to dataset repo ``repo_id`` and tag it ``v<N>``.

    ``endpoint`` defaults to ``$HF_ENDPOINT``, then the public Hub. Returns ``{"repo_id", "tag", "commit"}``.
    """
    versions = list_releases(directory)
    if not versions:
        raise LeaderboardError(f"nothing released in {directory}; run `cood-leaderboard release` first")
    version = versions[-1] if version is None else version
    source = release_dir(directory, version)
    tag = f"v{version}"
    api = HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True)
        published = {ref.name for ref in api.list_repo_refs(repo_id, repo_type="dataset").tags}
        later = sorted(t for t in published if t.startswith("v") and t[1:].isdigit() and int(t[1:]) >= version)
        if later:
            raise LeaderboardError(f"{repo_id} already has {later[-1]}; versions are published once and in order")
        with tempfile.TemporaryDirectory() as staging:
            _stage(Path(directory), source, version, repo_id, Path(staging))
            commit = api.upload_folder(folder_path=staging, repo_id=repo_id, repo_type="dataset",
                                       commit_message=f"leaderboard {tag}")
        api.create_tag(repo_id, tag=tag, repo_type="dataset", revision=commit.oid, tag_message=f"leaderboard {tag}")
    except LeaderboardError:
        raise
    except Exception as exc:  # HfHubHTTPError, OSError, and the HTTP client's transport errors
        raise LeaderboardError(f"publishing to {repo_id} failed: {type(exc).__name__}: {(str(exc) or '-').splitlines()[0]}") from None
    return {"repo_id": repo_id, "tag": tag, "commit": commit.oid}


def _stage(directory: Path, source: Path, version: int, repo_id: str, staging: Path) -> None:
    table = release_table(directory, version)
    info = release_info(directory, version)
    (staging / "results").mkdir()
    (staging / "records").mkdir()
    for name in (PARQUET, CSV):
        (staging / "results" / name).write_bytes((source / name).read_bytes())
    with open(staging / "records" / "records.jsonl", "w") as handle:
        for name in table.sort_values("seq")["record_file"]:
            handle.write(json.dumps(json.loads((directory / name).read_bytes()), separators=(",", ":")) + "\n")
    (staging / RELEASE_JSON).write_bytes((source / RELEASE_JSON).read_bytes())
    (staging / CHANGELOG).write_text(changelog(directory, up_to=version))
    bench = info["benchmark"]
    (staging / "README.md").write_text(CARD.format(
        pretty_name=json.dumps(f"C-OOD leaderboard: {bench['id']} {bench['version']}"), bench_id=bench["id"], bench_version=bench["version"], manifest=bench["manifest_sha256"] or "none",
        version=version, num_entries=info["num_entries"], num_levels=info["num_levels"], repo_id=repo_id))
