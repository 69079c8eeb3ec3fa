"""Features from the same forward pass as the logits, and the last layer that maps them to the logits.

A model that returns ``(logits, features)`` gives its own. Otherwise the features are the input of the model's last
``torch.nn.Linear`` with one output per ID class (a timm, torchvision or Hugging Face classifier's head: what timm's
``forward_head(pre_logits=True)`` returns), captured by a hook during the one pass. That layer's weight and bias are the
head that ViM, NNGuide, fDBD and the activation-shaping detectors read; a kappa that needs them checks, batch by
batch, that the logits are the head applied to the features.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.errors import HarnessError

HOW_TO_EXPOSE = (
    "return (logits, features) from forward(), or end the model with a torch.nn.Linear with one output per ID class"
)


def last_linear(model: torch.nn.Module, num_classes: int) -> torch.nn.Linear | None:
    """The model's last ``nn.Linear`` (in module order) with ``num_classes`` outputs, or None."""
    found = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == num_classes]
    return found[-1] if found else None


class FeatureTap:
    """Captures the input of the model's last linear layer on every forward pass."""

    def __init__(self, model: torch.nn.Module, num_classes: int):
        self.layer = last_linear(model, num_classes)
        self.captured: torch.Tensor | None = None
        if self.layer is not None:
            self.layer.register_forward_pre_hook(self._capture)

    def _capture(self, module, args) -> None:
        self.captured = args[0]

    def take(self) -> torch.Tensor | None:
        """The features of the last pass (flattened to (batch, dim)), and forget them."""
        captured, self.captured = self.captured, None
        return None if captured is None else captured.reshape(len(captured), -1)

    def clear(self) -> None:
        """Forget what the last pass captured, unread (a kappa's own passes may capture tensors of vmapped calls)."""
        self.captured = None

    @property
    def head(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The last layer's ``(weight, bias)`` in float64 (a zero bias when it has none), or None."""
        if self.layer is None:
            return None
        weight = self.layer.weight.detach().double().cpu().numpy()
        bias = self.layer.bias.detach().double().cpu().numpy() if self.layer.bias is not None else np.zeros(len(weight))
        return weight, bias


def check_features(name: str, features: np.ndarray | None) -> np.ndarray:
    if features is None:
        raise HarnessError(f"kappa '{name}' needs features, but the model gives none: {HOW_TO_EXPOSE}")
    return features


def check_head(name: str, logits: np.ndarray, features: np.ndarray, head) -> tuple[np.ndarray, np.ndarray]:
    """The head, once the logits are checked to be ``features @ weight.T + bias`` (to the precision of the pass)."""
    if head is None or head[0].shape[1] != features.shape[1]:
        raise HarnessError(
            f"kappa '{name}' needs the last layer that maps the features to the logits, and the model has "
            f"none that fits: {HOW_TO_EXPOSE}"
        )
    recomputed = features.astype(np.float64) @ head[0].T + head[1]
    scale = max(1.0, float(np.abs(logits).max(initial=0.0)))
    if not np.allclose(recomputed, logits, rtol=2e-2, atol=2e-2 * scale):
        raise HarnessError(
            f"kappa '{name}' needs the last layer, but the logits are not the model's last linear layer "
            f"applied to its features: {HOW_TO_EXPOSE}, and return those features"
        )
    return head


def require_exposed(kappas, head, gives_features) -> None:
    """Before any image pass: a kappa that needs features (or the last layer) from a model that gives none is one line.

    ``head`` is the model's last layer or None; ``gives_features()`` runs one trial pass on a blank image and says
    whether the model returns features of its own (asked only when there is no last layer to tap)."""
    wanting = [k for k in kappas if k.reads_features]
    if not wanting or head is not None:
        return
    if not gives_features():
        raise HarnessError(f"kappa '{wanting[0].name}' needs features, but the model gives none: {HOW_TO_EXPOSE}")
    heads = [k for k in wanting if k.reads_head]
    if heads:
        raise HarnessError(
            f"kappa '{heads[0].name}' needs the last layer that maps the features to the logits, and the "
            f"model has none: {HOW_TO_EXPOSE}"
        )
