"""The allocator keeps what a batch frees for the next: measured in page faults, never in time."""

import subprocess
import sys

# eight blocks of 24 MiB freed together, as a batch's activations are, three times after three to warm up
CYCLES = """
import resource, sys, torch
from harness.runtime.allocator import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
else:  # glibc's initial thresholds, held (its own adjustment of them depends on the history of the heap)
    import ctypes
    mallopt = ctypes.CDLL(None).mallopt
    assert mallopt(M_MMAP_THRESHOLD, 128 << 10) and mallopt(M_TRIM_THRESHOLD, 128 << 10)
def cycle():
    blocks = [torch.ones(6 << 20) for _ in range(8)]
    del blocks
for _ in range(3):
    cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", CYCLES, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_freed_memory_is_kept_for_the_next_batch():
    default, kept = page_faults("default"), page_faults("kept")
    assert default > 30_000  # each block mapped and unmapped: every page of it faulted in on each cycle
    assert kept * 10 < default
