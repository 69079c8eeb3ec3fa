"""A requested weights file, checked without running it: safetensors, or a torch file of tensors only.

The leaderboard needs no torch, so a torch file's pickle is read, never executed: every global it names must be one
of the tensor-rebuilding functions, storage types or dtypes a state dict needs (the families torch's weights-only
unpickler allows). The worker's harness then loads it with ``torch.load(weights_only=True)`` before any evaluation.
"""

from __future__ import annotations

import pickletools
import re
import zipfile
from pathlib import Path

from dataset_builder.errors import one_line
from leaderboard.errors import LeaderboardError

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
WEIGHT_SUFFIXES = (".safetensors", *TORCH_SUFFIXES)
# the globals a torch state dict's pickle names: tensor and parameter rebuilders, storage types, dtypes, OrderedDict
_ALLOWED = re.compile(
    r"^(torch\._utils _rebuild_[a-z0-9_]+|torch\._tensor _rebuild_from_type_v2|"
    r"torch [A-Za-z0-9]+Storage|torch (u?int\d+|float\d+|bfloat16|complex\d+|bool|half|float|double|long)|"
    r"collections OrderedDict|torch Size)$"
)


def check_weights_file(path: str | Path) -> str:
    """``"safetensors"`` or ``"torch"`` for a weights file that holds tensors only; a one-line error otherwise."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(path, framework="numpy") as handle:
                if not list(handle.keys()):
                    raise LeaderboardError(f"weights file {path.name} holds no tensors")
        except LeaderboardError:
            raise
        except Exception as exc:  # SafetensorError, OSError: the header or a tensor's range is broken
            raise LeaderboardError(
                f"weights file {path.name} is not a valid safetensors file: {one_line(exc)}"
            ) from exc
        return "safetensors"
    if path.suffix not in TORCH_SUFFIXES:
        raise LeaderboardError(f"weights file {path.name}: unknown format; use {' or '.join(WEIGHT_SUFFIXES)}")
    _scan_pickle(path)
    return "torch"


def _scan_pickle(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pickles) != 1:
                raise LeaderboardError(f"weights file {path.name} is no torch.save archive (no data.pkl)")
            data = archive.read(pickles[0])
    except zipfile.BadZipFile as exc:
        raise LeaderboardError(
            f"weights file {path.name} is no torch.save zip archive (legacy or broken); "
            "save it with torch.save, or as safetensors"
        ) from exc
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name in ("GLOBAL", "INST") and not _ALLOWED.match(str(arg)):
                raise LeaderboardError(
                    f"weights file {path.name} would call {str(arg).replace(' ', '.')} when loaded; "
                    "only tensors are accepted"
                )
            if opcode.name == "STACK_GLOBAL":
                raise LeaderboardError(
                    f"weights file {path.name} uses pickle protocol 4 globals, which only torch can "
                    "check: install cood-bench[torch], or save it as safetensors"
                )
    except ValueError as exc:
        raise LeaderboardError(f"weights file {path.name} holds a broken pickle: {exc}") from exc
