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
A multi-task run with `--popart` has one normalised output and one statistic per level (the
paper's multi-task PopArt); the agent picks each row's level (`level` ids `[T, B]`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: The smallest sigma used: below it, advantages would be scaled up more than 100x (the
#: returns of a run that earns nothing yet are all ~0).
SIGMA_MIN = 1e-2
SIGMA_MAX = 1e6

#: Sums a tensor of per-learner sums over the run's learners, in place (`--learners N`: each
#: learner holds a share of the batch); None: one learner holds all of it.
Reduce = Callable[[torch.Tensor], None]


def sigma_from(mu: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
    """The standard deviation from the first two moments, in [SIGMA_MIN, SIGMA_MAX]."""
    return (nu - mu.square()).clamp(min=SIGMA_MIN**2).sqrt().clamp(max=SIGMA_MAX)


class ValueHead(nn.Linear):
    """`nn.Linear(in_features, num_levels)` whose output for level l is
    `sigma_l * (w_l.x + b_l) + mu_l` (see module): one normalised value and one statistic per
    level, as the paper's multi-task agent (a single column for single-task runs)."""

    mu: torch.Tensor
    nu: torch.Tensor
    count: torch.Tensor

    def __init__(self, in_features: int, num_levels: int = 1) -> None:
        if num_levels < 1:
            raise ValueError(f"num_levels: invalid value {num_levels}; allowed: 1 or more")
        super().__init__(in_features, num_levels)
        self.num_levels = num_levels
        self.register_buffer("mu", torch.zeros(num_levels))
        self.register_buffer("nu", torch.ones(num_levels))
        self.register_buffer("count", torch.zeros(num_levels))  # updates so far, per level

    @property
    def sigma(self) -> torch.Tensor:
        """The targets' standard deviation per level, `[L]`, in [SIGMA_MIN, SIGMA_MAX]."""
        return sigma_from(self.mu, self.nu)

    def _pick(self, values: torch.Tensor, level: torch.Tensor | None) -> torch.Tensor:
        """`values` `[..., L]` -> `[..., 1]`: each row's column `level` (int, `[...]`); a
        one-level head has one column and ignores `level`."""
        if self.num_levels == 1:
            return values
        if level is None:
            raise ValueError(
                f"this value head has {self.num_levels} levels; pass each row's level id"
            )
        index = level.to(device=values.device, dtype=torch.long).expand(values.shape[:-1])
        return values.gather(-1, index.unsqueeze(-1))

    def normalized(self, x: torch.Tensor, level: torch.Tensor | None = None) -> torch.Tensor:
        """n(x), `[..., 1]`: the value in units of sigma, before mu is added; `level` (int,
        broadcastable to `x`'s leading dims) picks each row's level (needed with L > 1)."""
        return self._pick(super().forward(x), level)

    def forward(self, x: torch.Tensor, level: torch.Tensor | None = None) -> torch.Tensor:
        """v(x) `[..., 1]` in reward units, of each row's `level` (see `normalized`)."""
        return self._pick(super().forward(x) * self.sigma + self.mu, level)

    @torch.no_grad()
    def moments_with(
        self,
        targets: torch.Tensor,
        rate: float,
        level: torch.Tensor | None = None,
        reduce: Reduce | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(mu, nu, count)` `[L]` each after a step towards the mean and mean square of each
        level's `targets` (`[T, B]`, or any shape with `level` broadcastable to it; all level 0
        when None); changes nothing. A level with no targets here keeps its statistics.

        The step is `max(rate, 1 / k)` at a level's k-th update: the k-th statistics are the
        plain average of the first k batches' until that is smaller than `rate`, then a moving
        average (why: from mu = 0, sigma = 1, the first updates of a run whose returns are
        hundreds had losses ~10^5 and gradients clipped from ~2 * 10^4; docs/results.md).
        With `reduce`, the batch's targets are shared among learners: the counts and sums are
        the whole batch's, so every learner takes the same step.
        """
        targets = targets.detach().float()
        if level is None:
            level = torch.zeros((), dtype=torch.long)
        index = level.to(device=targets.device, dtype=torch.long).expand(targets.shape).flatten()
        flat = targets.flatten()
        size = self.num_levels
        seen = torch.zeros(size, device=flat.device).index_add_(0, index, torch.ones_like(flat))
        total = torch.zeros(size, device=flat.device).index_add_(0, index, flat)
        squares = torch.zeros(size, device=flat.device).index_add_(0, index, flat.square())
        if reduce is not None:
            sums = torch.stack([seen, total, squares])
            reduce(sums)
            seen, total, squares = sums.unbind(0)
        present = seen > 0
        # why: a level absent from this batch gets no step (its count and moments stay).
        mean = total / seen.clamp(min=1)
        square = squares / seen.clamp(min=1)
        count = self.count + present.float()
        step = torch.where(present, torch.clamp(1.0 / count.clamp(min=1), min=rate), 0.0)
        mu = torch.lerp(self.mu, mean, step)
        nu = torch.lerp(self.nu, square, step)
        return mu, nu, count

    def sigma_with(
        self,
        targets: torch.Tensor,
        rate: float,
        level: torch.Tensor | None = None,
        reduce: Reduce | None = None,
    ) -> torch.Tensor:
        """sigma per level `[L]` after `update(targets, rate, level)`, without updating (the
        loss's scale: PopArt takes the statistics' step before the gradient step, as the
        paper)."""
        mu, nu, _ = self.moments_with(targets, rate, level, reduce)
        return sigma_from(mu, nu)

    @torch.no_grad()
    def update(
        self,
        targets: torch.Tensor,
        rate: float,
        level: torch.Tensor | None = None,
        reduce: Reduce | None = None,
    ) -> None:
        """Take the statistics' step of `moments_with`, then rescale each level's row so that
        its output v_l(x) is unchanged for every x."""
        old_mu, old_sigma = self.mu.clone(), self.sigma
        mu, nu, count = self.moments_with(targets, rate, level, reduce)
        first = (self.count == 0) & (count > 0)
        self.mu.copy_(mu)
        self.nu.copy_(nu)
        self.count.copy_(count)
        new_sigma = self.sigma
        # why: v = sigma n + mu must not move for any x, per level (row) l:
        # w_l' = w_l sigma_l / sigma_l', b_l' = (sigma_l b_l + mu_l - mu_l') / sigma_l'.
        # Except at a level's first step: there w and b stay, so v(x) moves from ~0 (a fresh
        # head's n(x) is ~0) to ~mu, the mean return. Preserving v = 0 would leave every
        # advantage biased by -mu / sigma until the gradient moved the head that far
        # (~1 sigma on VizdoomBasic, docs/results.md).
        scale = torch.where(first, 1.0, old_sigma / new_sigma)
        bias = torch.where(first, self.bias, (old_sigma * self.bias + old_mu - self.mu) / new_sigma)
        self.weight.mul_(scale.unsqueeze(-1))
        self.bias.copy_(bias)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # why: checkpoints written before the head had statistics hold only weight and bias;
        # they were trained as mu = 0, sigma = 1.
        size = self.num_levels
        defaults = (
            ("mu", torch.zeros(size)),
            ("nu", torch.ones(size)),
            ("count", torch.zeros(size)),
        )
        for name, value in defaults:
            state_dict.setdefault(prefix + name, value)
        super()._load_from_state_dict(state_dict, prefix, *args)
