"""Pretrained weights on the Hugging Face Hub, for a zoo target given no weights file: the commit a revision names and
the weights file a library reads there, resolved through ``huggingface_hub`` (online, or with ``HF_HUB_OFFLINE=1`` from
its cache under ``HF_HOME``), each failure in one line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dataset_builder.hub_answer import hub_silence
from dataset_builder.shards import file_sha256
from harness.adapters.configs import check_size
from harness.errors import HarnessError

SAFE_TWINS = {"pytorch_model.bin": "model.safetensors", "open_clip_pytorch_model.bin": "open_clip_model.safetensors"}


@dataclass(frozen=True)
class HubWeights:
    """A weights file of a Hub model repo at one commit, and where the cache keeps it."""

    repo: str
    revision: str  # the commit's 40-hex sha
    file: str
    path: Path

    def record(self) -> dict:
        """What a record says of it (the model's ``hub_weights``): the repo, the commit, the file."""
        return {"repo": self.repo, "revision": self.revision, "file": self.file}

    def sha256(self) -> str:
        """The sha256 of the cached file (once the library has read it)."""
        return file_sha256(self.path)


def weight_files(filename: str | None) -> list[str]:
    """The files timm reads a Hub repo's weights from, in its order: the safetensors twin of a ``.bin`` first (the
    default file is ``pytorch_model.bin``, whose twin is ``model.safetensors``)."""
    name = filename or "pytorch_model.bin"
    twin = SAFE_TWINS.get(name) or (name.removesuffix(".bin") + ".safetensors" if name.endswith(".bin") else None)
    return [twin, name] if twin else [name]


def pin(kind: str, repo: str, files: list[str], revision: str | None, configuration: bool = False) -> HubWeights:
    """The first of ``files`` that ``repo`` holds at ``revision`` (None: main), fetched into the cache, with the commit
    ``revision`` names; a Hub that cannot be reached, a repo, revision or file that is not there, or offline a cache
    without them, is a HarnessError (``kind`` opens its message). A Hub that does not answer at once
    (:func:`dataset_builder.hub_answer.hub_silence`) is not asked again: the files come from the cache alone. A
    ``configuration`` file over the cap on one is refused before it is fetched
    (:func:`harness.adapters.configs.check_size`)."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f"{repo}@{revision}" if revision else repo
    silent = not constants.HF_HUB_OFFLINE and hub_silence() is not None
    missing: LocalEntryNotFoundError | None = None
    for file in files:
        try:
            local = silent or missing is not None  # the Hub did not answer: the files from the cache alone
            info = hf_hub_download(repo, file, revision=revision, local_files_only=local, dry_run=True)
            if configuration and info.file_size is not None:
                check_size(f"{kind}: {at}", file, info.file_size)
            hf_hub_download(repo, file, revision=revision, local_files_only=local)  # its revision cached for offline
        except HFValidationError as exc:
            raise HarnessError(f"{kind}: '{repo}' is not a Hub repo id: {str(exc).splitlines()[0]}") from exc
        except RepositoryNotFoundError as exc:
            raise HarnessError(
                f"{kind}: the Hub at {constants.ENDPOINT} has no model repo {repo} (or it is private or gated)"
            ) from exc
        except RevisionNotFoundError as exc:
            raise HarnessError(f"{kind}: the Hub model repo {repo} has no revision '{revision}'") from exc
        except LocalEntryNotFoundError as exc:  # offline, or the Hub unreachable, and not in the cache
            missing = missing or exc
            continue
        except EntryNotFoundError:
            continue
        except HfHubHTTPError as exc:
            raise HarnessError(f"{kind}: the Hub failed to answer for {at}: {str(exc).splitlines()[0]}") from exc
        return HubWeights(repo, info.commit_hash, file, Path(info.local_path))
    if missing is None:
        raise HarnessError(f"{kind}: the Hub model repo {at} holds no {' or '.join(files)}")
    if constants.HF_HUB_OFFLINE:
        raise HarnessError(
            f"{kind}: {at} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set: "
            "fetch it once online, or give --weights"
        ) from missing
    raise HarnessError(
        f"{kind}: cannot reach the Hugging Face Hub at {constants.ENDPOINT} to fetch {at}, and it is not in the cache "
        f"({constants.HF_HUB_CACHE}): check the network, or give --weights"
    ) from missing
