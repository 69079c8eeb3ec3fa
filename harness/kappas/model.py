"""A model's output as logits (and features), and the paper's kappas that need the model, not just its logits: ODIN
and MC-dropout (docs/method.md section 5)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.errors import HarnessError

ODIN_PRESETS = {"paper": {"temperature": 2.0, "epsilon": 1e-5}, "original": {"temperature": 1000.0, "epsilon": 0.0014}}
DEFAULT_ODIN_PRESET = "paper"
MC_DROPOUT_PASSES = 30


def split_output(output) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(logits, features or None)`` of a model output that is logits or a tuple ``(logits, features)``."""
    if isinstance(output, torch.Tensor):
        return output, None
    if isinstance(output, (tuple, list)) and len(output) in (1, 2) and all(isinstance(o, torch.Tensor) for o in output):
        return output[0], output[1] if len(output) == 2 else None
    kinds = type(output).__name__ + (
        f" of {', '.join(type(o).__name__ for o in output)}" if isinstance(output, (tuple, list)) else ""
    )
    raise HarnessError(f"the model returned a {kinds}; it must return a logits tensor or a tuple (logits, features)")


def logits_of(output) -> torch.Tensor:
    """The logits of a model output (see :func:`split_output`)."""
    return split_output(output)[0]


class LogitsOnly(torch.nn.Module):
    """The model with its logits as its only output (a submission's may return ``(logits, features)``)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return logits_of(self.model(x))


def odin(
    model: torch.nn.Module, images: torch.Tensor, temperature: float, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """ODIN (Liang et al. 2018) in the model's normalised input space.

    ``x' = x - eps * sign(-grad_x log softmax(f(x)/T)[yhat])``; returns (max log-softmax(f(x')/T),
    max softmax(f(x')/T)) in float64: the first ranks, the second is the reported confidence.
    """
    x = images.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        log_probs = F.log_softmax(logits_of(model(x)).float() / temperature, dim=1)
        loss = -log_probs.max(dim=1).values.sum()
        (grad,) = torch.autograd.grad(loss, x)
    perturbed = x.detach() - epsilon * torch.sign(grad)
    with torch.no_grad():
        log_probs = F.log_softmax(logits_of(model(perturbed)).double() / temperature, dim=1)
    score = log_probs.max(dim=1).values
    return score, score.exp()


def dropout_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)]


def mc_dropout(model: torch.nn.Module, images: torch.Tensor, passes: int, seeds) -> torch.Tensor:
    """Minus the entropy of the mean softmax over ``passes`` passes with only dropout layers dropping, each image's
    masks drawn from its own seed (``seeds``: one per image), so that an image's value is the same in any batch."""
    layers = dropout_layers(model)
    if not layers:
        raise HarnessError("kappa 'mc_dropout' needs a model with dropout layers; this model has none")
    other = sorted({type(layer).__name__ for layer in layers if type(layer) not in ROW_MASKS})
    if other:
        raise HarnessError(f"kappa 'mc_dropout' draws per-image masks for {', '.join(ROW_MASKS_NAMES)}, not {other[0]}")
    seeds = torch.as_tensor(seeds, dtype=torch.int64).to(images.device)
    at = [0]
    hooks = [
        layer.register_forward_hook(lambda m, _, out, i=i: out * _kept(m, out, seeds, at[0], i))
        for i, layer in enumerate(layers)
    ]
    try:
        with torch.no_grad():
            total = 0
            for at[0] in range(passes):
                total = total + F.softmax(logits_of(model(images)).double(), dim=1)
    finally:
        for hook in hooks:
            hook.remove()
    mean_probs = total / passes
    return torch.sum(mean_probs * torch.log(mean_probs.clamp_min(1e-300)), dim=1)


ROW_MASKS = {torch.nn.Dropout: 0, torch.nn.Dropout1d: 1, torch.nn.Dropout2d: 2, torch.nn.Dropout3d: 3}
ROW_MASKS_NAMES = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d"]


def _kept(layer: torch.nn.Module, out: torch.Tensor, seeds: torch.Tensor, at: int, index: int) -> torch.Tensor:
    """A dropout layer's mask for ``out`` (its output in eval mode, its input), scaled as torch scales it: per element
    (``Dropout``) or per channel (``Dropout1d/2d/3d``), each image's drawn from its seed, the pass and the layer."""
    spatial = ROW_MASKS[type(layer)]
    shape = out.shape[1:] if not spatial else (out.shape[1],) + (1,) * (out.dim() - 2)
    if layer.p >= 1:
        return torch.zeros((len(out), *shape), dtype=out.dtype, device=out.device)
    keep = uniform(seeds, at * 1024 + index, shape) >= layer.p
    return keep.to(out.dtype) / (1 - layer.p)


# splitmix64's constants as signed 64-bit integers
_GOLDEN, _MIX1, _MIX2 = (c - (1 << 64) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def uniform(seeds: torch.Tensor, salt: int, shape) -> torch.Tensor:
    """Uniform draws in [0, 1), ``shape`` per seed, each a pure function of its seed, ``salt`` and its place: the same
    on every device and in any batch. Written by hand (splitmix64 in integer tensor arithmetic, which wraps): torch's
    generators draw one stream per call, not one per image of a batch."""
    count = 1
    for n in shape:
        count *= int(n)
    places = torch.arange(count, device=seeds.device, dtype=torch.int64)
    offset = (salt * _MIX1 + _GOLDEN + (1 << 63)) % (1 << 64) - (1 << 63)  # as a wrapped 64-bit integer
    z = seeds[:, None] * _MIX2 + offset + places[None, :] * _GOLDEN
    for shift, factor in ((30, _MIX1), (27, _MIX2)):
        z = (z ^ _shifted(z, shift)) * factor
    z = z ^ _shifted(z, 31)
    return (_shifted(z, 11).double() / float(1 << 53)).view(len(seeds), *shape)


def _shifted(z: torch.Tensor, bits: int) -> torch.Tensor:
    """``z`` shifted right by ``bits`` as unsigned 64-bit integers."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)
