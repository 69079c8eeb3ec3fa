"""Loading what is evaluated: a submission file (the contract below) as a model, its preprocessing and kappas.

The submission contract, a Python file that defines:

- ``build_model() -> torch.nn.Module`` (required): returns logits ``(batch, num_id_classes)`` in the
  benchmark's ID class order (or, on a benchmark of a subset of ImageNet-1K's classes, its 1,000 logits, restricted
  to the ID classes' columns: :class:`ClassSubset`), or a tuple ``(logits, features)``.
- ``DATA_CONFIG`` (required unless ``transform`` is given): a timm data config, e.g.
  ``{"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}``;
  the harness builds timm's eval transform from it. ``input_size[0]`` is the channel count (1: greyscale, 3: RGB).
- ``transform()`` (optional): returns a callable ``PIL.Image -> Tensor`` that replaces ``DATA_CONFIG``'s transform.
- ``NAME`` (optional): the model's name in results (default: the file's stem).
- ``KAPPAS`` (optional): ``{"name": fn}``, with ``fn(logits: np.ndarray) -> np.ndarray`` of shape
  ``(batch,)``, higher = more in-distribution; decorate with ``harness.user_kappa(features=True)`` to also
  receive the features, ``harness.user_kappa(probability=True)`` to declare its values probabilities in [0, 1] that
  the prediction is right (its records then hold ECE, NLL and Brier).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import numbers
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from harness.bundle import Bundle
from harness.errors import HarnessError, cause, escaped, located
from harness.kappas import LogitFunction, check_kappa_name, registry, split_output
from harness.options import MAX_NAME_BYTES, check_name  # noqa: F401 (re-exported)

MAX_SIDE = 1024
MAX_PIXELS = MAX_SIDE * MAX_SIDE  # per image the harness decodes and transforms for a data config
DEFAULT_CROP_PCT = 0.875  # timm's, for a data config that names none (written here: the child never imports timm)


@dataclass
class Submission:
    """A model ready to evaluate, with what a result record must say about it."""

    name: str
    model: torch.nn.Module
    transform: Callable
    channels: int
    preprocessing: dict
    source: str
    file_sha256: str | None
    user_kappas: dict[str, LogitFunction] = field(default_factory=dict)
    weights_sha256: str | None = None  # computed from ``model`` unless given (a model in a child process)
    num_parameters: int | None = None
    bundle_sha256: str | None = None  # a submission file's code: :mod:`harness.bundle`
    hub_weights: dict | None = None  # pretrained weights fetched from the Hub: repo, revision (commit sha), file
    torchvision_weights: dict | None = None  # a torchvision weights entry's pretrained weights: entry, url
    class_subset: dict | None = None  # the model's outputs restricted to the ID classes: :meth:`ClassSubset.record`

    def __post_init__(self):
        check_name(self.name)
        if self.model is not None:
            self.weights_sha256 = weights_sha256(self.model)
            self.num_parameters = sum(p.numel() for p in self.model.parameters())


@dataclass(frozen=True)
class ClassSubset:
    """A benchmark's ID classes as a subset of the label space they were drawn from: ``source`` (e.g.
    ``ImageNet-1K``) of ``total`` classes, ``columns`` each ID class's index there, in the benchmark's ID class
    order. A model of ``total`` outputs is evaluated on the columns of the ID classes."""

    source: str
    total: int
    columns: tuple[int, ...]

    def record(self) -> dict:
        """What a result record says: the source, and how many of the model's outputs were used."""
        return {"source": self.source, "outputs_used": len(self.columns), "model_outputs": self.total}

    def head(self, head: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows of a ``total``-row head ``(weight, bias)`` that give the ID classes' logits."""
        return None if head is None else (head[0][list(self.columns)], head[1][list(self.columns)])


class SubsetLogits(torch.nn.Module):
    """A model of ``subset.total`` outputs restricted to the columns of the ID classes (its features unchanged)."""

    def __init__(self, model: torch.nn.Module, subset: ClassSubset):
        super().__init__()
        self.model = model
        self.register_buffer("columns", torch.tensor(subset.columns, dtype=torch.int64), persistent=False)

    def forward(self, x):
        logits, features = split_output(self.model(x))
        logits = logits[:, self.columns]
        return logits if features is None else (logits, features)


class OutputWidthMismatch(HarnessError):
    """A trial pass gave logits of another width than the benchmark's ID classes."""

    def __init__(self, message: str, width: int | None):
        super().__init__(message)
        self.width = width


def weights_sha256(model: torch.nn.Module) -> str:
    """A hash of the model's weights: names, dtypes, shapes and bytes of its state dict, in name order."""
    return state_sha256(
        (name, str(tensor.dtype), tuple(tensor.shape), raw_bytes(tensor))
        for name, tensor in sorted(model.state_dict().items())
    )


def raw_bytes(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's bytes as the weights hash reads them (a uint8 array; bfloat16 has no numpy dtype)."""
    tensor = tensor.detach().cpu().contiguous().reshape(-1)
    return tensor.view(torch.uint8).numpy() if tensor.numel() else np.zeros(0, np.uint8)


def state_sha256(entries) -> str:
    """The weights hash of ``(name, dtype, shape, raw bytes)`` entries in name order (a model's, or what a sandboxed
    child handed over)."""
    digest = hashlib.sha256()
    for name, dtype, shape, raw in entries:
        digest.update(f"{name}|{dtype}|{tuple(shape)}|".encode())
        digest.update(raw)
    return digest.hexdigest()


def user_kappa(features: bool = False, probability: bool = False):
    """Decorator for a submission's kappa: ``features``, it also takes the model's features (``fn(logits,
    features)``); ``probability``, its values are probabilities in [0, 1] that the prediction is right."""

    def mark(fn):
        fn.wants_features = features
        fn.probability = probability
        return fn

    return mark


def _import_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"cood_submission_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: any failure is reported in one line
        raise HarnessError(f"cannot load submission {located(exc, path)}: {cause(exc)}") from exc
    finally:
        sys.path.remove(str(path.parent))
    return module


def _code_of(fn: Callable) -> str:
    """A kappa's source code (its identity in records and the score cache), or its repr when there is none."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return repr(fn)


def timm_transform(config: dict) -> Callable:
    """timm's evaluation transform for a data config (input_size, mean, std, interpolation, crop_pct, crop_mode)."""
    from timm.data import create_transform

    keys = ("input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode")
    return create_transform(**{k: config[k] for k in keys if k in config}, is_training=False)


def check_data_config(config, what: str) -> dict:
    """A timm data config whose ``input_size`` is (channels, height, width) with 1 or 3 channels, whose ``mean`` and
    ``std`` (where given) are finite numbers, one per channel (``std`` above 0), and whose images, the input and its
    resize before the crop (``input_size / crop_pct``), hold at most ``MAX_PIXELS`` pixels each: the harness decodes
    and transforms the images outside the submission's memory limit."""
    size = config.get("input_size") if isinstance(config, dict) else None
    if not (
        isinstance(size, (tuple, list))
        and len(size) == 3
        and size[0] in (1, 3)
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in size[1:])
    ):
        raise HarnessError(f"{what}: input_size must be (channels, height, width) with 1 or 3 channels")
    for key in ("mean", "std"):
        values = config.get(key)
        if values is not None and not (
            (values.ndim == 1 if isinstance(values, np.ndarray) else isinstance(values, (tuple, list)))
            and len(values) == size[0]
            and all(_finite(v) for v in values)
            and (key == "mean" or all(v > 0 for v in values))
        ):
            raise HarnessError(
                f"{what}: {key} must be {size[0]} finite{' positive' if key == 'std' else ''} number"
                f"{'s' if size[0] > 1 else ''}, one per channel, got {escaped(repr(values), 80)}"
            )
    crop = config.get("crop_pct") or DEFAULT_CROP_PCT  # as timm reads it
    if not isinstance(crop, (int, float)) or isinstance(crop, bool) or not 0 < crop < math.inf:
        raise HarnessError(f"{what}: crop_pct must be a positive number")
    resized = [math.floor(n / crop) for n in size[1:]]
    if max(size[1] * size[2], resized[0] * resized[1]) > MAX_PIXELS:
        raise HarnessError(
            f"{what}: input_size {size[1]}x{size[2]} (resized to {resized[0]}x{resized[1]} before the crop) makes "
            f"images of more than {MAX_SIDE}x{MAX_SIDE} pixels, the most the harness makes"
        )
    return config


def _finite(value) -> bool:
    """Whether ``value`` is a real number a float holds, not NaN or infinite."""
    try:
        return isinstance(value, numbers.Real) and math.isfinite(value)
    except OverflowError:  # an int beyond a float's range
        return False


def recorded(config: dict) -> dict:
    """A data config as a record stores it (tuples as lists)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()}


def load_file(path: str | Path, sandboxed: bool = False) -> Submission:
    """Load a submission file (see the module docstring for the contract). In a sandboxed child (``sandboxed``) the
    transform and the bundle's hash are left to the harness, which computes both itself."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError(f"submission file {path} not found")
    module = _import_file(path)
    if not callable(getattr(module, "build_model", None)):
        raise HarnessError(f"submission {path} defines no build_model() function")
    config = getattr(module, "DATA_CONFIG", None)
    custom = getattr(module, "transform", None)
    if config is None:
        raise HarnessError(f"submission {path} defines no DATA_CONFIG (timm data config with at least input_size)")
    check_data_config(config, f"submission {path}: DATA_CONFIG")
    try:
        model = module.build_model()
        transform = custom() if callable(custom) else None if sandboxed else timm_transform(config)
    except Exception as exc:
        raise HarnessError(f"submission {located(exc, path)}: {cause(exc, 'building the model failed: ')}") from exc
    if not isinstance(model, torch.nn.Module):
        raise HarnessError(f"submission {path}: build_model() returned {type(model).__name__}, not a torch.nn.Module")
    kappas = {}
    for name, fn in (getattr(module, "KAPPAS", None) or {}).items():
        check_kappa_name(name, f"submission {path}")
        if name in registry():
            raise HarnessError(
                f"submission {path}: kappa '{name}' clashes with a registered kappa (see cood-harness kappas)"
            )
        if not callable(fn):
            raise HarnessError(f"submission {path}: KAPPAS['{name}'] is not callable")
        params = {"source": "submission", "code_sha256": hashlib.sha256(_code_of(fn).encode()).hexdigest()}
        declared = {k: getattr(fn, k, False) for k in ("wants_features", "probability")}
        if not all(isinstance(v, bool) for v in declared.values()):
            raise HarnessError(
                f"submission {path}: KAPPAS['{name}'] declares features or probability not as True/False"
            )
        kappas[name] = LogitFunction(name, fn, params=params, **declared)
    preprocessing = recorded(config)
    preprocessing["transform"] = "custom" if callable(custom) else "timm.create_transform"
    bundle_sha256, digests = (None, None) if sandboxed else Bundle.of(path).hash()
    return Submission(
        name=str(getattr(module, "NAME", path.stem)),
        model=model,
        transform=transform,
        channels=int(config["input_size"][0]),
        preprocessing=preprocessing,
        source=path.name,
        file_sha256=None if sandboxed else digests[path.name],
        user_kappas=kappas,
        bundle_sha256=bundle_sha256,
    )


def in_memory(
    model: torch.nn.Module,
    transform: Callable | dict | None = None,
    *,
    name: str | None = None,
    channels: int = 3,
    num_classes: int | None = None,
    subset: ClassSubset | None = None,
) -> Submission:
    """A model held in memory as a submission. ``transform``: a callable ``PIL.Image -> Tensor`` (images are converted
    to ``channels`` planes first), a timm data config, or None for a timm model (its own data config)."""
    if not isinstance(model, torch.nn.Module):
        raise HarnessError(f"the model must be a torch.nn.Module, got {type(model).__name__}")
    if transform is None:
        if getattr(model, "pretrained_cfg", None) is None:
            raise HarnessError(
                "pass transform=: a callable PIL.Image -> Tensor, or a timm data config "
                "(only a timm model brings its own)"
            )
        from timm.data import resolve_data_config

        transform = resolve_data_config({}, model=model)
    if isinstance(transform, dict):
        config = check_data_config(transform, "the data config")
        preprocessing = recorded(config) | {"transform": "timm.create_transform"}
        transform, channels = timm_transform(config), int(config["input_size"][0])
    elif callable(transform):
        preprocessing = {"transform": "custom", "channels": channels}
    else:
        raise HarnessError(f"transform must be callable or a timm data config, got {type(transform).__name__}")
    if channels not in (1, 3):
        raise HarnessError(f"channels must be 1 or 3, got {channels}")
    submission = Submission(
        name=name or type(model).__name__,
        model=model.eval(),
        transform=transform,
        channels=channels,
        preprocessing=preprocessing,
        source=f"python:{type(model).__module__}.{type(model).__qualname__}",
        file_sha256=None,
    )
    if num_classes is not None:
        check_output(submission, num_classes, subset)
    return submission


def check_output(submission: Submission, num_classes: int, subset: ClassSubset | None = None) -> None:
    """One trial pass (eval mode) on a blank image: the transform must give ``channels`` planes, the model
    ``num_classes`` logits, or ``subset.total`` of which it is then restricted to the ID classes' columns
    (:func:`fit_to_classes`, said in ``class_subset``)."""
    mode = "L" if submission.channels == 1 else "RGB"
    try:
        image = submission.transform(Image.new(mode, (320, 240)))
    except Exception as exc:
        raise HarnessError(f"{submission.source}: a trial forward pass failed: {type(exc).__name__}: {exc}") from exc
    if image.shape[0] != submission.channels:
        raise HarnessError(
            f"{submission.source}: the transform gives {image.shape[0]} channels, expected {submission.channels}"
        )
    restricted = fit_to_classes(submission.model, image, num_classes, subset, submission.source)
    if restricted is not None:
        submission.model, submission.class_subset = restricted.eval(), subset.record()


def trial_forward(model: torch.nn.Module, image: torch.Tensor, num_classes: int, source: str) -> None:
    """One pass (eval mode) of one input image: the model must give ``num_classes`` logits."""
    try:
        with torch.no_grad():
            output = model.eval()(image.unsqueeze(0))
    except Exception as exc:
        raise HarnessError(f"{source}: a trial forward pass failed: {type(exc).__name__}: {exc}") from exc
    try:
        logits = split_output(output)[0]
    except HarnessError as exc:
        raise HarnessError(f"{source}: {exc}") from exc
    if logits.ndim != 2 or logits.shape[1] != num_classes:
        raise OutputWidthMismatch(
            f"{source}: the model gives logits of shape {tuple(logits.shape)} for one image; "
            f"the benchmark has {num_classes} ID classes",
            logits.shape[1] if logits.ndim == 2 else None,
        )


def fit_to_classes(
    model: torch.nn.Module, image: torch.Tensor, num_classes: int, subset: ClassSubset | None, source: str
) -> torch.nn.Module | None:
    """A trial pass (:func:`trial_forward`): None when the model gives ``num_classes`` logits; a model of
    ``subset.total`` outputs restricted to the ID classes' columns (:class:`SubsetLogits`); any other width refused in
    one line (:func:`subset_note` when a subset was possible)."""
    try:
        trial_forward(model, image, num_classes, source)
        return None
    except OutputWidthMismatch as exc:
        if subset is None or exc.width != subset.total:
            raise OutputWidthMismatch(str(exc) + subset_note(subset, num_classes), exc.width) from None
    restricted = SubsetLogits(model, subset)
    trial_forward(restricted, image, num_classes, source)
    return restricted


def subset_note(subset: ClassSubset | None, num_classes: int) -> str:
    """What a refusal adds when the ID classes are a subset: the width a model restricted to them must have."""
    if subset is None:
        return ""
    return (
        f"; they are {num_classes:,} of {subset.source}'s {subset.total:,} classes: a model of {subset.total:,} "
        f"outputs is evaluated on their columns, this one's outputs do not number {subset.total:,}"
    )
