"""What the detectors of :mod:`harness.kappas.detectors` that score through the model share: the layers that a
``layers`` parameter names, their outputs on a pass (forward hooks), a fit as arrays (the state that travels to the
model's process) and pytorch-ood's outlier scores as a kappa's scores."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from harness.errors import HarnessError
from harness.kappas.model import logits_of


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside torch.compile's wrapper (the model itself when it has none)."""
    return getattr(model, "_orig_mod", model)


def named_layers(model: torch.nn.Module, spec: str, kappa: str) -> list[tuple[str, torch.nn.Module]]:
    """The modules ``spec`` names (``auto``: a timm model's ``feature_info``); an unknown name is one line."""
    model = unwrapped(model)
    top = ", ".join(name for name, _ in model.named_children())
    if spec == "auto":
        info = getattr(model, "feature_info", None)
        names = (
            [i["module"] for i in info if "module" in i]
            if isinstance(info, list) and info and isinstance(info[0], dict)
            else []
        )
        if not names:
            raise HarnessError(
                f"kappa '{kappa}' reads intermediate layers and this model has no timm feature_info to "
                f"choose them: name them, {kappa}:layers=NAME[,NAME...] (its top-level modules: {top})"
            )
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules or not n]
    if missing or not names:
        raise HarnessError(
            f"kappa '{kappa}': the model has no layer '{missing[0] if missing else spec}' (its top-level "
            f"modules: {top})"
        )
    return [(n, modules[n]) for n in names]


@contextmanager
def captured(layers: list[torch.nn.Module]):
    """The outputs of ``layers`` on the passes inside the block, in call order (a list per pass's layers)."""
    outputs: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda module, args, out: outputs.append(out)) for layer in layers]
    try:
        yield outputs
    finally:
        for hook in hooks:
            hook.remove()


def _channels_first(z: torch.Tensor) -> torch.Tensor:
    """A layer's output as pytorch-ood reads it: ``B x C x ...``; a timm token sequence ``B x N x D`` as
    ``B x D x N``."""
    return z.transpose(1, 2) if z.ndim == 3 else z


def layer_outputs(model: torch.nn.Module, layers: list[torch.nn.Module], images: torch.Tensor):
    """``(logits, [each layer's output, channels first])`` of one pass without gradients."""
    with torch.no_grad(), captured(layers) as outs:
        logits = logits_of(model(images)).float()
    if len(outs) != len(layers):
        raise HarnessError(f"the named layers gave {len(outs)} outputs on one pass, expected {len(layers)} (one each)")
    return logits, [_channels_first(z.float()) for z in outs]


def tensors(value):
    """A fit's arrays (or nested lists of them) as tensors."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return [tensors(v) for v in value] if isinstance(value, list) else value


def arrays(value):
    """A fit's tensors (or nested lists of them) as numpy arrays, the state that travels to the model's process."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return [arrays(v) for v in value] if isinstance(value, list) else value


def outlier_scores(outlier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """pytorch-ood's outlier scores (larger = more OOD) as a kappa's ``(scores, confidences)``: negated, float64."""
    scores = -outlier.detach().double()
    return scores, scores
