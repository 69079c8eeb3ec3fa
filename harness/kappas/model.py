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


def mc_dropout(model: torch.nn.Module, images: torch.Tensor, passes: int, generator_seed: int) -> torch.Tensor:
    """Minus the entropy of the mean softmax over ``passes`` passes with only dropout layers in train mode."""
    layers = dropout_layers(model)
    if not layers:
        raise HarnessError("kappa 'mc_dropout' needs a model with dropout layers; this model has none")
    for layer in layers:
        layer.train()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[images.device] if images.device.type == "cuda" else []):
            torch.manual_seed(generator_seed)
            mean_probs = sum(F.softmax(logits_of(model(images)).double(), dim=1) for _ in range(passes)) / passes
    finally:
        for layer in layers:
            layer.eval()
    return torch.sum(mean_probs * torch.log(mean_probs.clamp_min(1e-300)), dim=1)
