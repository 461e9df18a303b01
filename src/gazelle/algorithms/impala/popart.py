"""PopArt for the V-trace losses (`--popart`; Hessel et al. 2019, who train IMPALA's agent on
DMLab-30 with it): the value head learns the returns in units of their running standard
deviation sigma, and the policy term's advantages are divided by sigma, so neither term's
size follows the size of the rewards. The statistics and the output-preserving rescale are
the value head's (`gazelle.models.value`); this module feeds them each batch's targets.

why: on rewards paid every step, the returns are tens or hundreds while the value head,
moved ~lr per weight per update, starts near 0; for hundreds of updates the advantages were
mostly the return-to-go and the policy went deterministic (docs/results.md, "ViZDoom").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gazelle.models.value import Reduce, ValueHead, sigma_from

#: `(agent, batch, keep_targets) -> (loss, metrics)`; the loss hands its V-trace targets
#: (`vs` `[T, B]`, reward units) to `keep_targets`.
TargetsLoss = Callable[..., tuple[torch.Tensor, dict[str, Any]]]


def value_head(agent: nn.Module) -> ValueHead:
    """The agent's `ValueHead` (through a DDP or similar wrapper's `.module`)."""
    head = getattr(getattr(agent, "module", agent), "baseline", None)
    if not isinstance(head, ValueHead):
        raise TypeError(
            f"--popart needs gazelle's Agent (a ValueHead as `baseline`); got {type(head).__name__}"
        )
    return head


def batch_levels(agent: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """Each unroll's level id `[B]` when the agent keeps a value output per level (multi-task
    PopArt), else None."""
    if getattr(getattr(agent, "module", agent), "num_levels", 1) <= 1:
        return None
    return batch["level_id"].long()


def sigma_of(
    agent: nn.Module,
    targets: torch.Tensor,
    rate: float,
    level: torch.Tensor | None = None,
    reduce: Reduce | None = None,
) -> torch.Tensor:
    """The value head's sigma once this batch's `targets` `[T, B]` are in its statistics,
    detached (a constant of the loss): `[1]`, or each unroll's level's `[B]` when `level`
    `[B]` is given. The statistics themselves move after the optimiser step
    (`PopArtLoss.after_step`): the same step, so the loss's sigma is the new one. `reduce`:
    the batch's targets are shared among learners (`ValueHead.moments_with`)."""
    sigma = value_head(agent).sigma_with(targets, rate, level, reduce).detach()
    return sigma if level is None else sigma[level.to(sigma.device)]


class PopArtLoss:
    """`loss` (IMPALA's or APPO's, called with `keep_targets`), then after each optimiser
    step the value head's statistics take a step `rate` towards that batch's targets.

    `Learner` calls `after_step(agent)` after every applied update (never after a skipped
    one), so the statistics move once per optimiser step, as the weights do. With `reduce`
    (`--learners N`), each learner's `loss` holds a share of the batch, and the statistics
    are the whole batch's on every learner.
    """

    def __init__(self, loss: TargetsLoss, rate: float, reduce: Reduce | None = None) -> None:
        self.loss, self.rate, self.reduce = loss, rate, reduce
        self._targets: torch.Tensor | None = None
        self._level: torch.Tensor | None = None

    def _keep(self, vs: torch.Tensor) -> None:
        self._targets = vs.detach()

    def __call__(
        self, agent: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        self._targets = None
        loss, metrics = self.loss(agent, batch, keep_targets=self._keep)
        self._level = batch_levels(agent, batch)
        if self._targets is not None:
            head = value_head(agent)
            mu, nu, _ = head.moments_with(self._targets, self.rate, self._level, self.reduce)
            sigma = sigma_from(mu, nu)
            if head.num_levels == 1:
                metrics["popart/mu"], metrics["popart/sigma"] = mu[0], sigma[0]
            else:
                for level in range(head.num_levels):
                    metrics[f"popart/mu/{level}"] = mu[level]
                    metrics[f"popart/sigma/{level}"] = sigma[level]
        return loss, metrics

    def after_step(self, agent: nn.Module) -> None:
        if self._targets is not None:
            value_head(agent).update(self._targets, self.rate, self._level, self.reduce)
            self._targets = None
