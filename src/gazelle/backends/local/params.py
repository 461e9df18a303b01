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


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters then floating-point buffers, in a fixed order."""
    tensors: list[torch.Tensor] = list(module.parameters())
    tensors += [b for b in module.buffers() if b.is_floating_point()]
    return tensors


def flatten(module: nn.Module) -> torch.Tensor:
    """All of `module`'s weights (parameters, then float buffers) as one flat float32 CPU
    tensor: what travels to actors."""
    with torch.no_grad():
        return torch.cat([t.detach().reshape(-1).float().cpu() for t in _tensors(module)])


def load_flat(module: nn.Module, flat: torch.Tensor) -> None:
    """Copy a `flatten`ed vector back into `module`'s weights."""
    offset = 0
    with torch.no_grad():
        for tensor in _tensors(module):
            n = tensor.numel()
            tensor.copy_(flat[offset : offset + n].view_as(tensor))
            offset += n


class ParamStore:
    """Shared flat copy of a module's weights with a version number (-1: nothing yet).

    A sequence lock, not a mutex: the learner (the one writer) makes `seq` odd, copies,
    sets the version and makes `seq` even again; a reader copies and keeps the copy only if
    `seq` was the same even number before and after. A reader never blocks the writer, so an
    actor stopped or killed in the middle of a copy cannot stall the run (a mutex it held
    would never be released); a torn copy is detected and retried.
    """

    def __init__(self, module: nn.Module, ctx: Any = None) -> None:
        numel = sum(t.numel() for t in _tensors(module))
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
