"""Loading what is evaluated: a submission file (the contract below) as a model, its preprocessing and kappas.

The submission contract, a Python file that defines:

- ``build_model() -> torch.nn.Module`` (required): returns logits ``(batch, num_id_classes)`` in the
  benchmark's ID class order, or a tuple ``(logits, features)``.
- ``DATA_CONFIG`` (required unless ``transform`` is given): a timm data config, e.g.
  ``{"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}``;
  the harness builds timm's eval transform from it. ``input_size[0]`` is the channel count (1: greyscale, 3: RGB).
- ``transform()`` (optional): returns a callable ``PIL.Image -> Tensor`` that replaces ``DATA_CONFIG``'s transform.
- ``NAME`` (optional): the model's name in results (default: the file's stem).
- ``KAPPAS`` (optional): ``{"name": fn}``, with ``fn(logits: np.ndarray) -> np.ndarray`` of shape
  ``(batch,)``, higher = more in-distribution; decorate with ``harness.user_kappa(features=True)`` to also
  receive the features.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from timm.data import create_transform

from harness.errors import HarnessError
from harness.kappas import BUILTIN_LOGIT_KAPPAS, MODEL_KAPPAS, LogitKappa


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
    user_kappas: dict[str, LogitKappa] = field(default_factory=dict)

    @property
    def weights_sha256(self) -> str:
        return weights_sha256(self.model)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def weights_sha256(model: torch.nn.Module) -> str:
    """A hash of the model's weights: names, dtypes, shapes and bytes of its state dict, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        shape = tuple(tensor.shape)
        tensor = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{shape}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def user_kappa(features: bool = False):
    """Decorator for a submission's kappa that also takes the model's features: ``fn(logits, features)``."""
    def mark(fn):
        fn.wants_features = features
        return fn
    return mark


def _import_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"cood_submission_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: any failure is reported in one line
        raise HarnessError(f"cannot load submission {path}: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(path.parent))
    return module


def timm_transform(config: dict) -> Callable:
    """timm's evaluation transform for a data config (input_size, mean, std, interpolation, crop_pct, crop_mode)."""
    keys = ("input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode")
    return create_transform(**{k: config[k] for k in keys if k in config}, is_training=False)


def load_file(path: str | Path) -> Submission:
    """Load a submission file (see the module docstring for the contract)."""
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
    if "input_size" not in config or len(config["input_size"]) != 3 or config["input_size"][0] not in (1, 3):
        raise HarnessError(f"submission {path}: DATA_CONFIG['input_size'] must be (channels, height, width) with 1 or 3 channels")
    try:
        model = module.build_model()
        transform = custom() if callable(custom) else timm_transform(config)
    except Exception as exc:
        raise HarnessError(f"submission {path}: building the model failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise HarnessError(f"submission {path}: build_model() returned {type(model).__name__}, not a torch.nn.Module")
    kappas = {}
    for name, fn in (getattr(module, "KAPPAS", None) or {}).items():
        if name in BUILTIN_LOGIT_KAPPAS or name in MODEL_KAPPAS:
            raise HarnessError(f"submission {path}: kappa '{name}' clashes with a built-in kappa")
        if not callable(fn):
            raise HarnessError(f"submission {path}: KAPPAS['{name}'] is not callable")
        kappas[name] = LogitKappa(name, fn, params={"source": "submission"}, wants_features=getattr(fn, "wants_features", False))
    preprocessing = {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()}
    preprocessing["transform"] = "custom" if callable(custom) else "timm.create_transform"
    return Submission(
        name=str(getattr(module, "NAME", path.stem)),
        model=model,
        transform=transform,
        channels=int(config["input_size"][0]),
        preprocessing=preprocessing,
        source=path.name,
        file_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        user_kappas=kappas,
    )

