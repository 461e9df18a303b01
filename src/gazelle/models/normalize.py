"""Observation normalisation (`--normalize-obs`): each vector field scaled by the running mean
and standard deviation of what the learner has seen, clipped, before its encoder.

    x' = clip((x - mean) / sqrt(var + eps), -CLIP, CLIP)

The statistics are float buffers of the agent (`ObsNorm`), so they travel to the actors with
the weights, go into checkpoints and are what test mode uses. Only the learner moves them
(`Agent.update_obs_stats`, once per batch, before the loss): an actor acts with the
statistics of the weights it holds, so behaviour and learner see the same inputs up to the
policy lag. The merge of a batch into the running statistics is Chan et al.'s parallel
update of mean and variance; the count stops growing at `MAX_COUNT`, after which each batch
weighs as one part in `MAX_COUNT` of the total (a slow moving average, so the statistics keep
following a task whose states change as the agent improves).

why: MuJoCo's joint velocities are tens while its angles are tenths; a tanh MLP on raw inputs
saturates on the first and barely sees the second. PPO's published continuous-control
results normalise observations this way (Engstrom et al. 2020, "Implementation matters").
"""

from __future__ import annotations

import torch
from torch import nn

#: Normalised inputs are clipped to [-CLIP, CLIP].
CLIP = 5.0
#: The count at which the statistics become a moving average (module docstring).
MAX_COUNT = 1e6
EPS = 1e-8


class ObsNorm(nn.Module):
    """Running mean and variance of `size` features, and the normalisation by them.

    Buffers (float32, `[size]` and `[1]`): `mean`, `var`, `count`; a fresh module is the
    identity up to the clip (mean 0, var 1, count 0).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[N, size]` -> the normalised, clipped `[N, size]` (float32)."""
        scaled = (x.float() - self.mean) * torch.rsqrt(self.var + EPS)
        return scaled.clamp(-CLIP, CLIP)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the rows of `x` `[..., size]` into the statistics."""
        rows = x.detach().reshape(-1, x.shape[-1]).float()
        n = float(rows.shape[0])
        if n == 0:
            return
        batch_mean = rows.mean(0)
        batch_var = rows.var(0, unbiased=False)
        count = float(self.count)
        total = count + n
        delta = batch_mean - self.mean
        # why: Chan et al.'s merge of two sets' means and sums of squares.
        self.mean += delta * (n / total)
        m2 = self.var * count + batch_var * n + delta.pow(2) * (count * n / total)
        self.var.copy_(m2 / total)
        self.count.fill_(min(total, MAX_COUNT))
