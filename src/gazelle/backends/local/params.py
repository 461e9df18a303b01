"""Versioned weights in shared memory: the learner publishes, actors copy when it changes.

All parameters and buffers of a module are kept in one flat float32 tensor in shared memory
next to a version counter and a sequence lock (see `ParamStore`), so an actor never loads half
of one version and half of the next, and never holds anything the learner waits for.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from gazelle.runtime.weights import flatten, load_flat, weight_tensors

__all__ = ["ParamStore", "flatten", "load_flat"]


class ParamStore:
    """Shared flat copy of a module's weights with a version number (-1: nothing yet).

    A sequence lock, not a mutex: the learner (the one writer) makes `seq` odd, copies,
    sets the version and makes `seq` even again; a reader copies and keeps the copy only if
    `seq` was the same even number before and after. A reader never blocks the writer, so an
    actor stopped or killed in the middle of a copy cannot stall the run (a mutex it held
    would never be released); a torn copy is detected and retried.
    """

    def __init__(self, module: nn.Module, ctx: Any = None) -> None:
        numel = sum(t.numel() for t in weight_tensors(module))
        self.flat = torch.zeros(numel, dtype=torch.float32).share_memory_()
        self.version = torch.full((1,), -1, dtype=torch.int64).share_memory_()
        self.seq = torch.zeros(1, dtype=torch.int64).share_memory_()

    def publish(self, module: nn.Module, version: int) -> None:
        """Copy `module`'s weights in (from any device) and set the version."""
        flat = flatten(module)
        # why: odd while writing; readers that saw it odd, or saw it change, retry. Each
        # store is a separate call into torch, so they reach memory in program order (x86
        # keeps stores in order; the calls are compiler barriers).
        self.seq += 1
        self.flat.copy_(flat)
        self.version[0] = version
        self.seq += 1

    def current_version(self) -> int:
        return int(self.version[0])

    def pull(self, module: nn.Module, have_version: int) -> int:
        """Load the weights into `module` if newer than `have_version`; return its version."""
        if self.current_version() == have_version:
            return have_version
        while True:
            before = int(self.seq[0])
            if before % 2:
                time.sleep(0.0005)  # a publish is under way: ~1 ms for 1M weights
                continue
            version = int(self.version[0])
            flat = self.flat.clone()
            if int(self.seq[0]) == before:
                break
        load_flat(module, flat)
        return version
