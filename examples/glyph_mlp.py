"""Example submission: a one-hidden-layer MLP on raw pixels, a weaker classifier than ``glyph_cnn``.

Trained by ``python examples/train_glyphs.py``. It has no dropout, so ``mc_dropout`` is refused for it.
"""

from pathlib import Path

import numpy as np
from safetensors.torch import load_file
from torch import nn

NAME = "glyph_mlp"
DATA_CONFIG = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}
WEIGHTS = Path(__file__).with_name("weights") / "glyph_mlp.safetensors"
NUM_CLASSES = 36


def margin(logits: np.ndarray) -> np.ndarray:
    """A user-declared kappa: the gap between the two largest logits."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


KAPPAS = {"margin": margin}


def build_model(pretrained: bool = True) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(32 * 32, 64), nn.ReLU(inplace=True), nn.Linear(64, NUM_CLASSES))
    if pretrained:
        model.load_state_dict(load_file(WEIGHTS))
    return model
