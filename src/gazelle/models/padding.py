"""TensorFlow's 'same' padding for torch convolutions and max-pools.

'same' padding follows TensorFlow (the seeds' framework): output size `ceil(in / stride)`,
with the odd padding pixel at the bottom/right. `torch`'s symmetric padding gives the same
sizes but shifts windows by one pixel on even inputs, so the stride-2 layers pad explicitly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow 'SAME' padding `(before, after)` of one spatial dim (out = ceil(size/stride))."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def max_pool_same(x: torch.Tensor, kernel: int = 3, stride: int = 2) -> torch.Tensor:
    """Max-pool with TensorFlow 'SAME' padding: `[N, C, H, W] -> [N, C, ceil(H/s), ceil(W/s)]`.

    Padding is ignored by the max (as in TF). The `before` padding goes to `max_pool2d`; the
    extra `after` pixel of an uneven split comes from `ceil_mode`, which adds a last window
    that runs off the bottom/right edge.
    """
    (top, bottom), (left, right) = (
        same_padding(x.shape[-2], kernel, stride),
        same_padding(x.shape[-1], kernel, stride),
    )
    if bottom - top > 1 or right - left > 1:  # not reached for kernel 3, stride 2
        x = F.pad(x, (left, right, top, bottom), value=-math.inf)
        return F.max_pool2d(x, kernel, stride)
    return F.max_pool2d(x, kernel, stride, padding=(top, left), ceil_mode=True)


class SameConv2d(nn.Conv2d):
    """`nn.Conv2d` with TensorFlow 'SAME' padding (zeros), computed from each input's size."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.kernel_size[0], self.stride[0]
        top, bottom = same_padding(x.shape[-2], k, s)
        left, right = same_padding(x.shape[-1], k, s)
        if top == bottom and left == right:
            return F.conv2d(x, self.weight, self.bias, s, (top, left))
        return super().forward(F.pad(x, (left, right, top, bottom)))
