"""The value head, with PopArt's statistics (van Hasselt et al. 2016; Hessel et al. 2019,
"Multi-task deep reinforcement learning with PopArt", IMPALA's learner on DMLab-30).

The layer computes a normalised value n(x) = w.x + b and outputs the value in reward units,
v(x) = sigma * n(x) + mu. With mu = 0 and sigma = 1 (their initial values, kept unless the
learner runs with `--popart`) it is a plain linear layer. With `--popart` the learner:
- trains n on targets scaled by 1/sigma and divides the policy term's advantages by sigma
  (`gazelle.algorithms.impala.loss`), so both terms keep a size near 1 whatever the returns;
- after each update, moves mu and sigma towards the first two moments of the V-trace targets
  (`update`) and rescales w and b so that v(x) is unchanged for every x (PopArt's
  "preserving outputs precisely").

mu and nu (the second moment) are float buffers: they are saved in checkpoints and travel
to actors with the weights, so an actor's values (truncation bootstraps) are in reward units.
One statistic is shared by all levels of a multi-task run (the paper keeps one per level).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

#: The smallest sigma used: below it, advantages would be scaled up more than 100x (the
#: returns of a run that earns nothing yet are all ~0).
SIGMA_MIN = 1e-2
SIGMA_MAX = 1e6


def _sigma(mu: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
    return (nu - mu.square()).clamp(min=SIGMA_MIN**2).sqrt().clamp(max=SIGMA_MAX)


class ValueHead(nn.Linear):
    """`nn.Linear(in_features, 1)` whose output is `sigma * (w.x + b) + mu` (see module)."""

    mu: torch.Tensor
    nu: torch.Tensor
    count: torch.Tensor

    def __init__(self, in_features: int) -> None:
        super().__init__(in_features, 1)
        self.register_buffer("mu", torch.zeros(1))
        self.register_buffer("nu", torch.ones(1))
        self.register_buffer("count", torch.zeros(1))  # updates so far

    @property
    def sigma(self) -> torch.Tensor:
        """The targets' standard deviation, `[1]`, in [SIGMA_MIN, SIGMA_MAX]."""
        return _sigma(self.mu, self.nu)

    def normalized(self, x: torch.Tensor) -> torch.Tensor:
        """n(x), `[..., 1]`: the value in units of sigma, before mu is added."""
        return super().forward(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """v(x) `[..., 1]` in reward units."""
        return self.normalized(x) * self.sigma + self.mu

    @torch.no_grad()
    def moments_with(
        self, targets: torch.Tensor, rate: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(mu, nu, count)` after a step towards the mean and mean square of `targets` (any
        shape); changes nothing.

        The step is `max(rate, 1 / k)` at the k-th update: the k-th statistics are the plain
        average of the first k batches' until that is smaller than `rate`, then a moving
        average (why: from mu = 0, sigma = 1, the first updates of a run whose returns are
        hundreds had losses ~10^5 and gradients clipped from ~2 * 10^4; docs/results.md).
        """
        targets = targets.detach().float()
        count = self.count + 1
        step = torch.clamp(1.0 / count, min=rate)
        mu = torch.lerp(self.mu, targets.mean().reshape(1), step)
        nu = torch.lerp(self.nu, targets.square().mean().reshape(1), step)
        return mu, nu, count

    def sigma_with(self, targets: torch.Tensor, rate: float) -> torch.Tensor:
        """sigma after `update(targets, rate)`, `[1]`, without updating (the loss's scale:
        PopArt takes the statistics' step before the gradient step, as the paper)."""
        mu, nu, _ = self.moments_with(targets, rate)
        return _sigma(mu, nu)

    @torch.no_grad()
    def update(self, targets: torch.Tensor, rate: float) -> None:
        """Take the statistics' step of `moments_with`, then rescale the layer so that its
        output v(x) is unchanged for every x."""
        old_mu, old_sigma = self.mu.clone(), self.sigma
        mu, nu, count = self.moments_with(targets, rate)
        self.mu.copy_(mu)
        self.nu.copy_(nu)
        self.count.copy_(count)
        new_sigma = self.sigma
        # why: v = sigma n + mu must not move for any x:
        # w' = w sigma / sigma', b' = (sigma b + mu - mu') / sigma'.
        self.weight.mul_(old_sigma / new_sigma)
        self.bias.copy_((old_sigma * self.bias + old_mu - self.mu) / new_sigma)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # why: checkpoints written before the head had statistics hold only weight and bias;
        # they were trained as mu = 0, sigma = 1.
        defaults = (("mu", torch.zeros(1)), ("nu", torch.ones(1)), ("count", torch.zeros(1)))
        for name, value in defaults:
            state_dict.setdefault(prefix + name, value)
        super()._load_from_state_dict(state_dict, prefix, *args)
