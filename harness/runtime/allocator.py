"""glibc's allocator, told to keep the memory a forward pass frees for the next batch.

By default glibc hands a freed block back to the system when the free memory at the top of its heap passes a
threshold that adapts to the largest block freed so far (or, for a block above 128 KiB, maps and unmaps it apart),
and the next batch faults every page of it in again: about 9,000 page faults a batch for the glyph CNN on the CPU,
a third of its forward time. Fixed thresholds keep blocks up to ``HEAP_BLOCK_BYTES`` on the heap and up to
``KEPT_FREE_BYTES`` of free heap in the process. Set through ``ctypes`` because Python has no wrapper of
``mallopt``; elsewhere than glibc nothing changes.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
HEAP_BLOCK_BYTES = 32 << 20  # the largest glibc allows on the heap
KEPT_FREE_BYTES = 256 << 20


def keep_freed_memory() -> bool:
    """Fix glibc's thresholds in this process (and the processes it forks); whether they were set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, KEPT_FREE_BYTES))
