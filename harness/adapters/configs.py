"""A model's configuration read from a Hub repo or a folder (its ``config.json``), checked before any model is built: at
most :data:`MAX_CONFIG_BYTES`, a JSON object, and describing a model of at most :data:`MAX_PARAMETERS` parameters and
:data:`MAX_MODULES` modules, counted by building it on the meta device (shapes only: no tensor memory is allocated, and
the count is the library's own, whatever the architecture)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from dataset_builder.errors import one_line
from harness.errors import HarnessError

MAX_CONFIG_BYTES = 4 * 2**20  # both label maps of ImageNet-21K's 21,841 classes, as transformers saves them: 1.6 MiB
MAX_PARAMETERS = 5_000_000_000  # 20 GB of float32 weights: EVA-02 Enormous (4.4 B) fits, a 6.7 B ViT-7B does not
MAX_MODULES = 10_000  # the largest registered classifiers have under 1,600 (MaxViT-XLarge: 1,548)


def check_size(where: str, file: str, size: int) -> None:
    """A HarnessError when a configuration file of ``size`` bytes is over :data:`MAX_CONFIG_BYTES`."""
    if size > MAX_CONFIG_BYTES:
        raise HarnessError(
            f"{where}: {file} is {size:,} bytes, over the cap of {MAX_CONFIG_BYTES:,} on a configuration"
        )


def read_config(path: Path, where: str) -> dict:
    """The JSON object in the configuration file ``path``; one line opened by ``where`` (the kind and the repo or
    folder, never the cache path) when it is over the size cap, not JSON, or not an object."""
    check_size(where, path.name, path.stat().st_size)
    try:
        data = json.loads(path.read_bytes())
    except ValueError as exc:  # UnicodeDecodeError included
        raise HarnessError(f"{where}: {path.name} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise HarnessError(f"{where}: {path.name} holds a JSON {type(data).__name__}, not an object")
    return data


def check_model_size(where: str, build: Callable[[], torch.nn.Module]) -> None:
    """Build the model with ``build()`` on the meta device and refuse it in one line when it has over
    :data:`MAX_PARAMETERS` parameters (its buffers' elements counted as parameters: a relative-position index grows
    with the window's fourth power), or over :data:`MAX_MODULES` modules (the build stops at the first one over: a
    configuration of a million tiny layers costs no more than one of the largest real models)."""
    modules = 0

    def count(module, name, submodule):
        nonlocal modules
        modules += 1
        if modules > MAX_MODULES:
            raise HarnessError(f"{where}: its configuration describes a model of over {MAX_MODULES:,} modules")

    handle = torch.nn.modules.module.register_module_module_registration_hook(count)
    try:
        with torch.device("meta"):
            model = build()
    except HarnessError:
        raise
    except Exception as exc:  # whatever a library makes of a configuration it was not written for: one line
        raise HarnessError(f"{where}: cannot build the model its configuration describes: {one_line(exc)}") from exc
    finally:
        handle.remove()
    parameters = sum(t.numel() for t in (*model.parameters(), *model.buffers()))
    if parameters > MAX_PARAMETERS:
        raise HarnessError(
            f"{where}: its configuration describes a model of {parameters:,} parameters, over the cap of "
            f"{MAX_PARAMETERS:,}"
        )
