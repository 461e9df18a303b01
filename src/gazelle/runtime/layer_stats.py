"""Per layer group: gradient RMS and update-to-weight ratio of each optimiser step.

These two numbers show a learner that runs but does not learn: a torso whose weights move by
1e-5 of their size per update never starts to depend on the observation, whatever the loss
says. (Measured on Pong with the seed's RMSProp at epsilon 0.01: torso ratio ~4e-5, heads
~1e-2; docs/results.md.)

Groups are the agent's top-level children (`torso`, `instruction`, `core`, `policy`,
`baseline` for `gazelle.models.Agent`; any module's children otherwise), so a custom agent
gets its own groups for free.

Metric names: `layers/grad_rms/<group>` (RMS over the group's weights of the gradient the
optimiser sees, after clipping) and `layers/update_ratio/<group>` (`||w_new - w_old|| /
||w_old||` over the group).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

#: Below this update-to-weight ratio, a group is taken to be stalled (see `StallWatch`).
#: Healthy torsos measured here move by 1e-4 to 1e-2 of their norm per update; the stalled
#: Pong torso by ~4e-5.
STALL_RATIO = 1e-5


def parameter_groups(module: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Trainable parameters by the name of the top-level child that holds them."""
    groups: dict[str, list[nn.Parameter]] = {}
    for name, param in module.named_parameters():
        if param.requires_grad:
            groups.setdefault(name.split(".", 1)[0], []).append(param)
    return groups


class LayerStats:
    """Measures one optimiser step per group: call `before_step()` after the gradients are
    final (clipped), then `after_step()` once the optimiser has stepped."""

    def __init__(self, module: nn.Module) -> None:
        self.groups = parameter_groups(module)
        self._before: dict[str, list[torch.Tensor]] = {}
        self._grad_rms: dict[str, torch.Tensor] = {}

    def before_step(self) -> None:
        self._grad_rms.clear()
        for group, params in self.groups.items():
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                squares = sum(g.detach().float().pow(2).sum() for g in grads)
                count = sum(g.numel() for g in grads)
                self._grad_rms[group] = torch.sqrt(torch.as_tensor(squares) / count)
            self._before[group] = [p.detach().clone() for p in params]

    def after_step(self) -> dict[str, torch.Tensor]:
        """Detached 0-dim tensors: `layers/grad_rms/<group>`, `layers/update_ratio/<group>`."""
        metrics: dict[str, torch.Tensor] = {}
        for group, params in self.groups.items():
            before = self._before.get(group)
            if before is None:
                continue
            update = sum((p.detach() - old).float().pow(2).sum() for p, old in zip(params, before))
            weight = sum(old.float().pow(2).sum() for old in before)
            # why: a group of all-zero weights (a fresh zero-initialised head) has no scale to
            # compare against; its ratio is the update's norm itself.
            ratio = torch.sqrt(torch.as_tensor(update)) / torch.sqrt(
                torch.as_tensor(weight)
            ).clamp_min(1e-12)
            metrics[f"layers/update_ratio/{group}"] = ratio
            if group in self._grad_rms:
                metrics[f"layers/grad_rms/{group}"] = self._grad_rms[group]
        self._before.clear()
        return metrics


class StallWatch:
    """Warns once when a group's update ratio has stayed below `threshold` for `patience`
    consecutive updates (the stall of a torso that never starts to learn).

    `warn` receives one line; it is called again only after the group recovers and stalls
    anew.
    """

    def __init__(
        self,
        group: str = "torso",
        threshold: float = STALL_RATIO,
        patience: int = 500,
        warn: Callable[[str], None] = print,
    ) -> None:
        self.group, self.threshold, self.patience, self.warn = group, threshold, patience, warn
        self._below = 0
        self._warned = False

    def update(self, metrics: dict[str, torch.Tensor | float], updates: int) -> bool:
        """Feed one update's metrics; returns True when it warned now."""
        value = metrics.get(f"layers/update_ratio/{self.group}")
        if value is None:
            return False
        ratio = float(value)
        if math.isfinite(ratio) and ratio >= self.threshold:
            self._below, self._warned = 0, False
            return False
        self._below += 1
        if self._below >= self.patience and not self._warned:
            self._warned = True
            self.warn(
                f"gazelle: warning: the {self.group}'s weights have moved by less than "
                f"{self.threshold:g} of their norm per update for {self._below} updates "
                f"(now {ratio:.1e}, at update {updates}): it is not learning. Check "
                "layers/grad_rms and layers/update_ratio in TensorBoard; usual causes: an "
                "optimiser epsilon larger than the gradients (--epsilon), a learning rate too "
                "small (--learning-rate), a head-dominated gradient clipped by --grad-norm-clip"
            )
            return True
        return False
