"""A module's weights as one flat float32 vector: the form in which they travel between
processes and machines (the local backend's shared `ParamStore`, Ray's object store, the
Ray parameter server's pulls)."""

from __future__ import annotations

import torch
from torch import nn


def weight_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Parameters then floating-point buffers, in a fixed order."""
    tensors: list[torch.Tensor] = list(module.parameters())
    tensors += [b for b in module.buffers() if b.is_floating_point()]
    return tensors


def flatten(module: nn.Module) -> torch.Tensor:
    """All of `module`'s weights (parameters, then float buffers) as one flat float32 CPU
    tensor: what travels to actors."""
    with torch.no_grad():
        return torch.cat([t.detach().reshape(-1).float().cpu() for t in weight_tensors(module)])


def load_flat(module: nn.Module, flat: torch.Tensor) -> None:
    """Copy a `flatten`ed vector back into `module`'s weights."""
    offset = 0
    with torch.no_grad():
        for tensor in weight_tensors(module):
            n = tensor.numel()
            tensor.copy_(flat[offset : offset + n].view_as(tensor))
            offset += n
