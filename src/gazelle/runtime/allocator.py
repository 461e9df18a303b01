"""Keep freed tensor memory in the process instead of handing it back to the OS.

glibc's malloc serves big blocks (above a threshold that grows to at most 32 MiB) with a
fresh `mmap` and returns them with `munmap` on free. A learner step allocates and frees
hundreds of MiB of activations (the deep torso at B=32, T=20: ~290 MiB per conv output in
fp32), so every step page-faults its whole working set in again: measured here, 2.7M minor
faults and 40% of the learner's CPU time in the kernel, 400 samples/core-s instead of ~650.

`keep_freed_memory()` raises the mmap threshold and the trim threshold so big blocks come
from the heap and stay there after `free`, which is what jemalloc/tcmalloc do by design.
The cost: a process keeps its peak heap size. It only changes glibc's malloc on Linux; set
`GAZELLE_MALLOC_TUNING=0` to leave the allocator alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

#: mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: The largest value mallopt's int argument takes: blocks up to 2 GiB come from the heap.
THRESHOLD_BYTES = 2**31 - 1
ENV_SWITCH = "GAZELLE_MALLOC_TUNING"


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for a process that reallocates big tensors every step.

    Returns True when the allocator was changed; False on other platforms or C libraries,
    or when `GAZELLE_MALLOC_TUNING=0`. Safe to call more than once.
    """
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return False
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # why: setting the mmap threshold also turns off glibc's dynamic threshold, and the trim
    # threshold stops the top of the heap being released after each step's frees.
    ok = mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) == 1
    return mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES) == 1 and ok
