"""Versioned weights in shared memory: the learner publishes, actors copy when it changes.

All parameters and buffers of a module are kept in one flat float32 tensor in shared memory
next to a version counter. Readers and the writer take the same lock while copying, so an
actor never loads half of one version and half of the next.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters then floating-point buffers, in a fixed order."""
    tensors: list[torch.Tensor] = list(module.parameters())
    tensors += [b for b in module.buffers() if b.is_floating_point()]
    return tensors


class ParamStore:
    """Shared flat copy of a module's weights with a version number (-1: nothing yet)."""

    def __init__(self, module: nn.Module, ctx: Any) -> None:
        numel = sum(t.numel() for t in _tensors(module))
        self.flat = torch.zeros(numel, dtype=torch.float32).share_memory_()
        self.version = torch.full((1,), -1, dtype=torch.int64).share_memory_()
        self.lock = ctx.Lock()

    def publish(self, module: nn.Module, version: int) -> None:
        """Copy `module`'s weights in (from any device) and set the version."""
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1).float().cpu() for t in _tensors(module)])
        # why: the lock makes the copy and the version bump one step for readers.
        with self.lock:
            self.flat.copy_(flat)
            self.version[0] = version

    def current_version(self) -> int:
        return int(self.version[0])

    def pull(self, module: nn.Module, have_version: int) -> int:
        """Load the weights into `module` if newer than `have_version`; return its version."""
        if self.current_version() == have_version:
            return have_version
        with self.lock:
            version = int(self.version[0])
            flat = self.flat.clone()
        offset = 0
        with torch.no_grad():
            for tensor in _tensors(module):
                n = tensor.numel()
                tensor.copy_(flat[offset : offset + n].view_as(tensor))
                offset += n
        return version
