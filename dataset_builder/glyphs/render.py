"""Deterministic rendering of one character to a small greyscale PNG."""

from __future__ import annotations

import functools
import hashlib
import io
import os
from dataclasses import dataclass

import matplotlib
import numpy as np
from PIL import Image, ImageDraw, ImageFont

IMAGE_SIZE = 32
CANVAS = 48
CANONICAL_SIZE = 24
FACES = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
)


def face_path(face: str) -> str:
    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf", face)


@functools.cache
def font(face: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(face_path(face), size)


@dataclass(frozen=True)
class Style:
    """How one image of a character is drawn."""

    face: str
    size: int
    dx: int
    dy: int
    angle: float
    ink: int
    paper: int
    noise: float
    noise_seed: int


def style_for(seed: int, class_id: str, image_key: str) -> Style:
    """The seeded, per-image random style: face, size, offset, rotation, contrast and noise."""
    digest = hashlib.sha256(f"{seed}/{class_id}/{image_key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return Style(
        face=FACES[int(rng.integers(len(FACES)))],
        size=int(rng.integers(17, 27)),
        dx=int(rng.integers(-3, 4)),
        dy=int(rng.integers(-3, 4)),
        angle=float(np.round(rng.uniform(-15.0, 15.0), 2)),
        ink=int(rng.integers(150, 256)),
        paper=int(rng.integers(0, 70)),
        noise=float(np.round(rng.uniform(0.0, 24.0), 2)),
        noise_seed=int.from_bytes(digest[8:16], "little"),
    )


def draw(char: str, face: str, size: int, dx: int = 0, dy: int = 0, angle: float = 0.0) -> np.ndarray:
    """The character's coverage in [0, 1] on an IMAGE_SIZE square (centred, then shifted and rotated)."""
    canvas = Image.new("L", (CANVAS, CANVAS), 0)
    ImageDraw.Draw(canvas).text(
        (CANVAS // 2 + dx, CANVAS // 2 + dy), char, fill=255, font=font(face, size), anchor="mm"
    )
    if angle:
        canvas = canvas.rotate(angle, resample=Image.BILINEAR)
    margin = (CANVAS - IMAGE_SIZE) // 2
    crop = canvas.crop((margin, margin, margin + IMAGE_SIZE, margin + IMAGE_SIZE))
    return np.asarray(crop, dtype=np.float32) / 255.0


def render_png(char: str, style: Style) -> bytes:
    """One benchmark image: drawn glyph, contrast, Gaussian noise, 8-bit greyscale PNG."""
    coverage = draw(char, style.face, style.size, style.dx, style.dy, style.angle)
    pixels = style.paper + coverage * (style.ink - style.paper)
    pixels = pixels + np.random.default_rng(style.noise_seed).normal(0.0, style.noise, pixels.shape)
    image = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8), mode="L")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def canonical(char: str, face: str = FACES[0]) -> np.ndarray:
    """The upright, centred, noiseless drawing used to compare characters."""
    return draw(char, face, CANONICAL_SIZE)


def ink_box(char: str, face: str = FACES[0]) -> tuple[int, int]:
    """Width and height in pixels of the character's ink at the canonical size."""
    left, top, right, bottom = font(face, CANONICAL_SIZE).getbbox(char, anchor="mm")
    return right - left, bottom - top
