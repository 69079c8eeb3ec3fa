"""When the README's quick start speaks: seconds from the command to its first line, and the longest silence after it.

Runs ``cood-harness submit examples/glyph_cnn.py`` in a fresh cache (the embedded benchmark is built on first use, as
on a fresh clone) and then again with the cache warm, reading its output as it comes (progress bars count as lines),
and prints the phase lines with their times.

    python benchmarks/first_lines.py [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAR = ("%|", "img/s", "class/s", "s/class", "it/s")


def watch(command: list[str], env: dict) -> tuple[float, float, list[tuple[float, str]]]:
    """Seconds to the first line, the longest gap between lines, and the lines that are not progress-bar updates."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    times, lines = [], []
    while chunk := proc.stdout.read1(65536):
        now = time.perf_counter() - start
        for piece in chunk.replace(b"\r", b"\n").decode(errors="replace").split("\n"):
            if piece.strip():
                times.append(now)
                if not any(mark in piece for mark in BAR):
                    lines.append((now, piece))
    if proc.wait() != 0:
        sys.exit(f"the command failed ({proc.returncode}): {lines[-1][1] if lines else ''}")
    gaps = [b - a for a, b in zip(times, times[1:])]
    return times[0], max(gaps, default=0.0), lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cood-first-lines-") as tmp:
        env = {**os.environ, "COOD_BENCH_CACHE": str(Path(tmp) / "cache")}
        command = [
            "cood-harness",
            "submit",
            "examples/glyph_cnn.py",
            "--device",
            args.device,
            "--out",
            str(Path(tmp) / "out"),
        ]
        for label in ("fresh cache (the benchmark is built)", "warm cache (every shard from the score cache)"):
            first, gap, lines = watch(command, env)
            print(f"{label}: first line after {first:.2f} s, longest silence {gap:.1f} s")
            for at, line in lines:
                if not line.startswith(("  ", " level")):
                    print(f"  {at:7.1f} s  {line[:110]}")


if __name__ == "__main__":
    main()
