"""Example submission: a small CNN trained on the glyph benchmark's ID training set (36 characters).

Trained by ``python examples/train_glyphs.py``; its dropout layer makes ``mc_dropout`` available.
"""

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

NAME = "glyph_cnn"
DATA_CONFIG = {"input_size": (1, 32, 32), "mean": (0.5,), "std": (0.5,), "interpolation": "bilinear", "crop_pct": 1.0}
WEIGHTS = Path(__file__).with_name("weights") / "glyph_cnn.safetensors"
NUM_CLASSES = 36


class GlyphCNN(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.features = nn.Sequential(block(1, 16), block(16, 32), block(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Dropout(0.3), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build_model(pretrained: bool = True) -> nn.Module:
    model = GlyphCNN()
    if pretrained:
        model.load_state_dict(load_file(WEIGHTS))
    return model
