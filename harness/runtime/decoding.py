"""Turning a batch of benchmark images (their bytes) into the model's input tensor.

Two decoders, chosen with ``--decoder``:

- ``pil``: each image opened with Pillow and passed through the submission's own transform. Any transform works.
- ``torchvision``: for the transforms timm builds (resize, centre crop, to-tensor, normalise, recognised by
  :func:`plan_of`): JPEGs decoded by ``torchvision.io`` in batches (nvJPEG on a GPU), PNGs by libspng (``pyspng``,
  else ``torchvision.io``), the resize done as Pillow
  does it, and to-tensor and normalise done once per batch, on the device. Images torchvision cannot decode, or
  whose mode differs from the model's, are opened with Pillow instead (the same pixels).

Pillow's resize is reproduced by :func:`resize_crop`: the same filter coefficients, rounded to the same 22-bit fixed
point, the same horizontal-then-vertical passes with the same rounding and clipping, in int32 tensor ops (written
by hand: no library resizes tensors the way Pillow resizes images, and timm's transforms resize with Pillow). On the
CPU, Pillow's own C resize is faster than tensor ops, so the CPU path resizes with Pillow and the tensor resize runs
on the GPU; both give Pillow's pixels.
"""

from __future__ import annotations

import functools
import io
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T

try:
    import pyspng
except ImportError:  # optional: torchvision decodes PNGs without it
    pyspng = None

from dataset_builder.errors import BenchmarkError
from harness.options import DECODERS

PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit resampling


def _bicubic(x: float) -> float:
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _bilinear(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _box(x: float) -> float:
    return 1.0 if -0.5 < x <= 0.5 else 0.0


def _sinc(x: float) -> float:
    if x == 0.0:
        return 1.0
    x *= math.pi
    return math.sin(x) / x


HAMMING_A, HAMMING_B = float(np.float32(0.54)), float(np.float32(0.46))  # single-precision constants in Pillow


def _hamming(x: float) -> float:
    x = abs(x)
    if x == 0.0:
        return 1.0
    if x >= 1.0:
        return 0.0
    x *= math.pi
    return math.sin(x) / x * (HAMMING_A + HAMMING_B * math.cos(x))


def _lanczos(x: float) -> float:
    return _sinc(x) * _sinc(x / 3) if -3.0 <= x < 3.0 else 0.0


# Pillow's resampling filters and their support, by the name torchvision's InterpolationMode gives them
FILTERS: dict[str, tuple[Callable[[float], float], float]] = {
    "bicubic": (_bicubic, 2.0),
    "bilinear": (_bilinear, 1.0),
    "box": (_box, 0.5),
    "hamming": (_hamming, 1.0),
    "lanczos": (_lanczos, 3.0),
}


@functools.lru_cache(maxsize=1024)
def coefficients(
    in_size: int, out_size: int, first: int, count: int, filter_name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pillow's coefficients for output pixels ``first .. first + count`` of a resize from ``in_size`` to
    ``out_size``: source indices ``(count, taps)`` and int32 fixed-point weights (zero-padded taps)."""
    kernel, base_support = FILTERS[filter_name]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = base_support * filterscale
    taps = int(math.ceil(support)) * 2 + 1
    index = np.zeros((count, taps), np.int64)
    weight = np.zeros((count, taps), np.int32)
    for row, xx in enumerate(range(first, first + count)):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        values = [kernel((x + xmin - center + 0.5) * (1.0 / filterscale)) for x in range(xmax)]
        total = 0.0
        for value in values:
            total += value
        for x, value in enumerate(values):
            value = value / total if total != 0.0 else value
            weight[row, x] = (
                int(-0.5 + value * (1 << PRECISION_BITS)) if value < 0 else int(0.5 + value * (1 << PRECISION_BITS))
            )
        index[row, :xmax] = np.arange(xmin, xmin + xmax)
        index[row, xmax:] = xmin
    return torch.from_numpy(index), torch.from_numpy(weight)


@functools.lru_cache(maxsize=1024)
def _on_device(
    in_size: int, out_size: int, first: int, count: int, filter_name: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`coefficients` kept on ``device`` (a copy to a GPU waits for it: made once per geometry)."""
    return tuple(t.to(device) for t in coefficients(in_size, out_size, first, count, filter_name))


def _pass(x: torch.Tensor, index: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One Pillow resampling pass along the last axis of int32 ``x``: weighted taps, rounded, shifted, clipped."""
    total = (x[..., index] * weight).sum(-1, dtype=torch.int32) + (1 << (PRECISION_BITS - 1))
    return (total >> PRECISION_BITS).clamp_(0, 255)


def crop_offsets(size: tuple[int, int], crop: tuple[int, int]) -> tuple[int, int]:
    """The top and left of torchvision's centre crop ``crop`` of an image of ``size`` (both ``(h, w)``)."""
    return int(round((size[0] - crop[0]) / 2.0)), int(round((size[1] - crop[1]) / 2.0))


def resize_crop(image: torch.Tensor, size: tuple[int, int], crop: tuple[int, int], filter_name: str) -> torch.Tensor:
    """Pillow's ``resize(size[::-1], filter)`` then torchvision's centre crop to ``crop``, of uint8 ``(..., C, H, W)``
    tensors on any device; only the cropped pixels are computed. Pillow skips the pass of an unchanged axis."""
    height, width = image.shape[-2:]
    (out_h, out_w), (crop_h, crop_w) = size, crop
    top, left = crop_offsets(size, crop)
    if out_h == height:
        image = image[..., top : top + crop_h, :]
    else:
        first, last = _rows(height, out_h, top, crop_h, filter_name)
        rows, row_weight = _on_device(height, out_h, top, crop_h, filter_name, image.device)
        image, rows = image[..., first:last, :], rows - first
    if (out_h, out_w) == (height, width):
        return image[..., left : left + crop_w].contiguous()
    x = image.to(torch.int32)
    if out_w == width:
        x = x[..., left : left + crop_w]
    else:
        x = _pass(x, *_on_device(width, out_w, left, crop_w, filter_name, image.device))
    if out_h != height:
        x = _pass(x.transpose(-1, -2), rows, row_weight).transpose(-1, -2)
    return x.to(torch.uint8)


@functools.lru_cache(maxsize=1024)
def _rows(in_size: int, out_size: int, first: int, count: int, filter_name: str) -> tuple[int, int]:
    """The source rows the vertical pass reads: ``[first, last)``."""
    index = coefficients(in_size, out_size, first, count, filter_name)[0]
    return int(index.min()), int(index.max()) + 1


@dataclass(frozen=True)
class Plan:
    """A timm-style eval transform as data: resize (shorter side to an int, or to ``(h, w)``), centre crop,
    to-tensor, normalise."""

    resize: int | tuple[int, int] | None
    filter_name: str
    crop: tuple[int, int] | None
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None

    def sizes(self, height: int, width: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """The resize's output ``(h, w)`` and the crop ``(h, w)`` for an image, as torchvision computes them;
        None when the crop is larger than the resized image (torchvision pads: left to the submission's transform)."""
        if self.resize is None:
            size = (height, width)
        elif isinstance(self.resize, int):
            short, long = (width, height) if width <= height else (height, width)
            new_short, new_long = self.resize, int(self.resize * long / short)
            size = (new_long, new_short) if width <= height else (new_short, new_long)
        else:
            size = self.resize
        crop = self.crop or size
        return None if crop[0] > size[0] or crop[1] > size[1] else (size, crop)


def plan_of(transform: Callable) -> Plan | None:
    """The :class:`Plan` of a torchvision ``Compose`` of Resize / CenterCrop / (Maybe)ToTensor / Normalize, as timm
    builds them; None for anything else (the ``pil`` decoder then runs the transform itself)."""
    steps = list(getattr(transform, "transforms", None) or [])
    resize = filter_name = crop = mean = std = None
    names = [type(step).__name__ for step in steps]
    expected = [n for n in ("Resize", "CenterCrop") if n in names] + [
        "ToTensor" if "ToTensor" in names else "MaybeToTensor"
    ]
    expected += ["Normalize"] if "Normalize" in names else []
    if names != expected:
        return None
    for step in steps:
        if isinstance(step, T.Resize):
            size = step.size if isinstance(step.size, int) else tuple(step.size)
            if step.max_size is not None or step.antialias is False or step.interpolation.value not in FILTERS:
                return None
            resize = size[0] if isinstance(size, tuple) and len(size) == 1 else size
            filter_name = step.interpolation.value
        elif isinstance(step, T.CenterCrop):
            crop = tuple(step.size)
        elif isinstance(step, T.Normalize):
            if step.inplace:
                return None
            mean, std = tuple(float(v) for v in step.mean), tuple(float(v) for v in step.std)
    return Plan(resize, filter_name or "bilinear", crop, mean, std)


def joined(tensors: list[torch.Tensor], new_axis: bool = False) -> torch.Tensor:
    """``torch.stack`` (``new_axis``) or ``torch.cat`` of tensors on one device; on the CPU by numpy, which copies on
    the calling thread alone: a torch copy started by the reading thread would start a second team of threads beside
    the model's and slow every layer of its forward pass."""
    if tensors[0].device.type != "cpu":
        return torch.stack(tensors) if new_axis else torch.cat(tensors)
    arrays = [t.numpy() for t in tensors]
    shape = (len(arrays), *arrays[0].shape) if new_axis else (sum(len(a) for a in arrays), *arrays[0].shape[1:])
    out = np.empty(shape, arrays[0].dtype)  # contiguous, whatever the parts' strides (numpy would keep theirs)
    return torch.from_numpy(np.stack(arrays, out=out) if new_axis else np.concatenate(arrays, out=out))


def _check_size(width: int, height: int, max_pixels: int, where: str) -> None:
    if width * height > max_pixels:
        raise BenchmarkError(
            f"shard {where} is {width}x{height} pixels, above the benchmark's max_image_pixels ({max_pixels})"
        )


def _opened(data: bytes, max_pixels: int, where: str) -> Image.Image:
    """A sample's image, opened lazily, its size checked against ``max_pixels`` on the header (before decoding)."""
    try:
        image = Image.open(io.BytesIO(data))
    except Exception as exc:  # any undecodable sample is reported with its shard and key
        raise BenchmarkError(f"corrupt shard {where} cannot be decoded ({type(exc).__name__}: {exc})") from exc
    _check_size(image.width, image.height, max_pixels, where)
    return image


def open_checked(data: bytes, mode: str, max_pixels: int, where: str) -> Image.Image:
    """A sample's image decoded by Pillow and converted to ``mode``; a BenchmarkError names ``where`` otherwise
    (``where``: ``"<shard>: sample <key>"``)."""
    image = _opened(data, max_pixels, where)
    try:
        return image.convert(mode)
    except Exception as exc:
        raise BenchmarkError(f"corrupt shard {where} cannot be decoded ({type(exc).__name__}: {exc})") from exc


class PilDecoder:
    """The submission's transform on each image, opened with Pillow (any transform); runs in the loader workers."""

    name = "pil"
    device = torch.device("cpu")

    def __init__(self, transform: Callable, channels: int, max_pixels: int):
        self.transform, self.mode, self.max_pixels = transform, "L" if channels == 1 else "RGB", max_pixels

    def __call__(self, datas: list[bytes], wheres: list[str]) -> torch.Tensor:
        return joined(
            [self.transform(open_checked(d, self.mode, self.max_pixels, w)) for d, w in zip(datas, wheres)], True
        )


def _torchvision_io():
    import torchvision.io

    warnings.filterwarnings("ignore", message=".*decoding and encoding capabilities of TorchVision are deprecated.*")
    return torchvision.io


class TensorDecoder:
    """The ``torchvision`` decoder: batched decoding, Pillow's resize, then to-tensor and normalise once per batch on
    ``device`` (nvJPEG and the tensor resize on a GPU; Pillow's resize on the CPU, faster there than tensor ops)."""

    name = "torchvision"

    def __init__(self, plan: Plan, channels: int, max_pixels: int, device: torch.device | str = "cpu"):
        self.plan, self.channels, self.max_pixels = plan, channels, max_pixels
        self.mode = "L" if channels == 1 else "RGB"
        self.device = torch.device(device)
        self.tensor_resize = self.device.type != "cpu"  # on the CPU, Pillow's own resize is the fast one
        self.io = _torchvision_io()
        shape = (1, channels, 1, 1)
        self.mean = (
            None if plan.mean is None else torch.tensor(plan.mean, dtype=torch.float32).view(shape).to(self.device)
        )
        self.std = None if plan.std is None else torch.tensor(plan.std, dtype=torch.float32).view(shape).to(self.device)

    def _decoded(self, datas: list[bytes], wheres: list[str]) -> list[torch.Tensor | Image.Image]:
        """Each image as a uint8 ``(C, H, W)`` tensor (torchvision; JPEGs in one batched call) or a Pillow image
        (anything torchvision cannot decode to the model's mode exactly as Pillow would)."""
        out: list = [None] * len(datas)
        jpegs = []
        for i, (data, where) in enumerate(zip(datas, wheres)):
            if _png_mode(data, self.max_pixels, where) == self.mode:
                out[i] = self._png(data, where)
                continue
            if _jpeg_mode(data, self.max_pixels, where) == self.mode:
                jpegs.append(i)
            else:
                out[i] = open_checked(data, self.mode, self.max_pixels, where)
        if jpegs:
            raw = [torch.frombuffer(bytearray(datas[i]), dtype=torch.uint8) for i in jpegs]
            try:
                decoded = self.io.decode_jpeg(raw, device=self.device)
            except RuntimeError:  # one bad JPEG fails the batch: Pillow names it (or decodes what nvJPEG refused)
                decoded = [open_checked(datas[i], self.mode, self.max_pixels, wheres[i]) for i in jpegs]
            for i, image in zip(jpegs, decoded):
                out[i] = image
        return out

    def _png(self, data: bytes, where: str) -> torch.Tensor | Image.Image:
        """An 8-bit greyscale or RGB PNG as a uint8 ``(C, H, W)`` tensor: libspng when installed (a small image in a
        third of the time of libpng through torchvision), else torchvision; Pillow's image when they fail (Pillow
        names a broken file)."""
        try:
            if pyspng is None:
                return self.io.decode_png(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            array = pyspng.load(data)
        except RuntimeError:
            return open_checked(data, self.mode, self.max_pixels, where)
        return torch.from_numpy(array).unsqueeze(0) if array.ndim == 2 else torch.from_numpy(array).permute(2, 0, 1)

    def _sizes(self, height: int, width: int, where: str) -> tuple[tuple[int, int], tuple[int, int]]:
        sizes = self.plan.sizes(height, width)
        if sizes is None:
            raise BenchmarkError(f"shard {where}: the crop is larger than the resized image; use --decoder pil")
        return sizes

    def _with_pillow(self, image: torch.Tensor | Image.Image, where: str) -> torch.Tensor:
        """One image resized by Pillow itself and centre-cropped, as a uint8 ``(C, h, w)`` tensor on the device."""
        if isinstance(image, torch.Tensor):
            image = Image.fromarray(image.cpu().permute(1, 2, 0).squeeze(-1).numpy(), self.mode)
        (out_h, out_w), (crop_h, crop_w) = self._sizes(image.height, image.width, where)
        if (out_h, out_w) != (image.height, image.width):
            image = image.resize((out_w, out_h), Image.Resampling[self.plan.filter_name.upper()])
        top, left = crop_offsets((out_h, out_w), (crop_h, crop_w))
        array = np.asarray(image.crop((left, top, left + crop_w, top + crop_h)), dtype=np.uint8)
        return (
            torch.from_numpy(array.reshape(crop_h, crop_w, -1).copy())
            .permute(2, 0, 1)
            .to(self.device, non_blocking=True)
        )

    def __call__(self, datas: list[bytes], wheres: list[str]) -> torch.Tensor:
        return self.normalize(self.pixels(datas, wheres))

    def pixels(self, datas: list[bytes], wheres: list[str]) -> torch.Tensor:
        """A batch's uint8 ``(N, C, h, w)`` model inputs before normalising: decoded, resized and cropped. Decoded
        tensors of one size are resized together by :func:`resize_crop` (with ``tensor_resize``, as on a GPU, else
        only when no resize is needed); Pillow resizes the rest."""
        decoded = self._decoded(datas, wheres)
        out: list = [None] * len(decoded)
        by_shape: dict[tuple, list[int]] = {}
        for i, image in enumerate(decoded):
            if isinstance(image, torch.Tensor):
                by_shape.setdefault(tuple(image.shape), []).append(i)
            else:
                out[i] = self._with_pillow(image, wheres[i])
        for shape, members in by_shape.items():
            sizes = self._sizes(*shape[-2:], wheres[members[0]])
            if not self.tensor_resize and sizes[0] != shape[-2:]:
                for i in members:
                    out[i] = self._with_pillow(decoded[i], wheres[i])
                continue
            images = joined([decoded[i].to(self.device, non_blocking=True) for i in members], True)
            for i, image in zip(members, resize_crop(images, *sizes, self.plan.filter_name)):
                out[i] = image
        return joined(out, True)

    def normalize(self, pixels: torch.Tensor) -> torch.Tensor:
        """ToTensor then Normalize, on a whole batch: the same float32 operations, so the same values."""
        images = pixels.to(self.device).to(torch.float32).div(255)
        return images if self.mean is None else images.sub(self.mean).div(self.std)


_PNG_MODES = {(8, 0): "L", (8, 2): "RGB"}  # (bit depth, colour type) -> the Pillow mode it decodes to


def _png_mode(data: bytes, max_pixels: int, where: str) -> str | None:
    """The Pillow mode of an 8-bit greyscale or RGB PNG, read from its header (its size checked against
    ``max_pixels``); None for anything else."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR" or len(data) < 26:
        return None
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    _check_size(width, height, max_pixels, where)
    return _PNG_MODES.get((data[24], data[25]))


_JPEG_MODES = {1: "L", 3: "RGB"}  # components of an 8-bit JPEG -> the Pillow mode it decodes to (4, CMYK: Pillow)
_NO_LENGTH = {0x01, *range(0xD0, 0xD9)}  # markers without a length field


def _jpeg_mode(data: bytes, max_pixels: int, where: str) -> str | None:
    """The Pillow mode of an 8-bit greyscale or colour JPEG, read from its frame header (its size checked against
    ``max_pixels``); None for anything else. Walking the markers by hand costs a tenth of opening the file with Pillow,
    once per image of every batch."""
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 10 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF or marker in _NO_LENGTH:
            i += 1 if marker == 0xFF else 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            height, width = int.from_bytes(data[i + 5 : i + 7], "big"), int.from_bytes(data[i + 7 : i + 9], "big")
            _check_size(width, height, max_pixels, where)
            return _JPEG_MODES.get(data[i + 9]) if data[i + 4] == 8 and width and height else None
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def make_decoder(name: str, transform: Callable, channels: int, max_pixels: int, device: torch.device | str = "cpu"):
    """The decoder ``name`` (``auto``: ``torchvision`` when the transform is recognised, else ``pil``)."""
    if name not in DECODERS:
        raise ValueError(f"--decoder must be one of {', '.join(DECODERS)}, got {name!r}")
    plan = plan_of(transform) if name != "pil" else None
    if plan is None:
        if name == "torchvision":
            raise ValueError(
                "--decoder torchvision needs a timm-style transform (Resize, CenterCrop, ToTensor, "
                "Normalize); this submission's transform is its own: use --decoder pil"
            )
        return PilDecoder(transform, channels, max_pixels)
    return TensorDecoder(plan, channels, max_pixels, device)
