"""The allocator tuning keeps big freed blocks in the process (no page faults per step)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

# Allocates, touches and frees a 256 MiB tensor 12 times; prints the minor page faults of
# the last 4 rounds (the heap grows to its working size in the first rounds).
SCRIPT = """
import resource, torch
from gazelle.runtime.allocator import keep_freed_memory
print(keep_freed_memory())
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(12):
    if i == 8:
        before = faults()
    x = torch.ones(64 * 2**20)
    x.sum()
    del x
print(faults() - before)
"""


def run_script(switch: str) -> tuple[bool, int]:
    env = {**os.environ, "GAZELLE_MALLOC_TUNING": switch}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="the tuning only applies to glibc's malloc",
)
def test_big_blocks_are_reused_instead_of_faulted_in_again() -> None:
    tuned, tuned_faults = run_script("1")
    untuned, untuned_faults = run_script("0")
    assert tuned and not untuned
    pages = 4 * 256 * 2**20 // 4096  # 4 rounds of 256 MiB in 4 KiB pages
    # why: untuned, glibc mmaps and munmaps every block, so each round faults every page in.
    assert untuned_faults > pages // 2
    assert tuned_faults < pages // 20
