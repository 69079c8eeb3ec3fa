"""Where and how the model runs: device, mixed precision, memory format, compilation, and the
batch back-off on out-of-memory."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from harness.errors import HarnessError
from harness.runtime.allocator import keep_freed_memory

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def auto_device(device: str) -> str:
    """``auto`` becomes ``cuda`` when a CUDA GPU is available, else ``cpu``; anything else is kept."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def software_versions() -> dict:
    """torch, torchvision, timm and CUDA versions (CUDA: None on a CPU-only build)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {
        "torch": torch.__version__,
        "torchvision": installed("torchvision"),
        "timm": installed("timm"),
        "cuda": torch.version.cuda,
    }


@dataclass(frozen=True)
class Execution:
    device: torch.device
    amp: str = "none"  # none | bf16 | fp16
    channels_last: bool = False
    compile: bool = False

    @classmethod
    def resolve(
        cls, device: str = "auto", amp: str = "auto", channels_last: bool | None = None, compile: bool = False
    ) -> Execution:
        """Defaults by device: on CUDA bf16 autocast and channels_last, on the CPU neither. ``auto``: CUDA when
        available, else the CPU."""
        device = auto_device(device)
        try:
            dev = torch.device(device)
        except RuntimeError as exc:
            raise HarnessError(f"unknown device '{device}': {exc}") from exc
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise HarnessError(f"device '{device}' requested, but CUDA is not available here")
        if amp == "auto":
            amp = "bf16" if dev.type == "cuda" else "none"
        if amp not in AMP_DTYPES:
            raise HarnessError(f"unknown --amp '{amp}'; known: auto, {', '.join(AMP_DTYPES)}")
        return cls(dev, amp, dev.type == "cuda" if channels_last is None else channels_last, compile)

    def describe(self) -> dict:
        """The effective settings and the software and hardware they ran on (a record's run details)."""
        return {
            "device": str(self.device),
            "gpu": self.gpu_name(),
            "amp": self.amp,
            "channels_last": self.channels_last,
            "compile": self.compile,
            "versions": software_versions(),
        }

    def gpu_name(self) -> str | None:
        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None

    def summary(self) -> str:
        """One line saying where the model runs, e.g. ``device: cuda:0 (NVIDIA H100), bf16 autocast``."""
        if self.device.type == "cuda":
            where = f"{self.device} ({self.gpu_name()})"
        else:
            where = f"{self.device}" + ("" if torch.cuda.is_available() else " (no CUDA GPU found)")
        return f"device: {where}, " + ("float32" if self.amp == "none" else f"{self.amp} autocast")

    def numerics(self) -> dict:
        """What changes the scores' bits (part of the score cache key)."""
        return {"device_type": self.device.type, "amp": self.amp, "channels_last": self.channels_last}

    def share_cpu(self, workers: int) -> None:
        """On the CPU, leave the loader workers their cores: torch gets the rest (at least one), unless
        OMP_NUM_THREADS says otherwise. Oversubscribed cores halve the throughput."""
        if self.device.type == "cpu" and workers > 0 and "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) - workers))

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model ready to run here; the process that runs it keeps the memory a batch frees for the next
        (:mod:`harness.runtime.allocator`)."""
        keep_freed_memory()
        model = model.to(self.device).eval()
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return torch.compile(model) if self.compile else model

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        """A batch on the device in the memory format the run records (the layout changes the kernels, and so the
        speed and the last bits of the scores)."""
        images = images.to(self.device, non_blocking=True)
        if self.channels_last and images.ndim == 4:
            return images.contiguous(memory_format=torch.channels_last)
        return images.contiguous()

    def autocast(self):
        dtype = AMP_DTYPES[self.amp]
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None)
