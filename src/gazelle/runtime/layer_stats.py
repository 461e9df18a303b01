"""Per layer group: gradient RMS and update-to-weight ratio of each optimiser step.

These two numbers show a learner that runs but does not learn: a torso whose weights move by
1e-5 of their size per update never starts to depend on the observation, whatever the loss
says. (An earlier session measured Pong with the seed's RMSProp at epsilon 0.01 at a torso
ratio ~4e-5, heads ~1e-2; docs/results.md. `STALL_RATIO` gives today's measurements.)

Groups are the agent's top-level children (`torso`, `instruction`, `core`, `policy`,
`baseline` for `gazelle.models.Agent`; any module's children otherwise), so a custom agent
gets its own groups for free.

Metric names: `layers/grad_rms/<group>` (RMS over the group's weights of the gradient the
optimiser sees, after clipping) and `layers/update_ratio/<group>` (`||w_new - w_old|| /
||w_old||` over the group).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: Below this update-to-weight ratio (at the initial learning rate), a group is taken to be
#: stalled (see `StallWatch`). Between the two sets of torso ratios measured on the
#: project's 2-core machine (progress.jsonl rows, divided by the decayed rate's share),
#: 2.5x from the highest stalled figure and 2.5x from the lowest learning one:
#:
#: - learning: `gazelle train --env PongNoFrameskip-v4 --max-seconds 180` 5.9e-4 to 1.5e-3
#:   (median 9.7e-4, past 100K frames); `--env CartPole-v1 --total-frames 200000` (return
#:   271) 3.5e-3 to 2.1e-2; `--algo a3c --env PongNoFrameskip-v4 --max-seconds 240` 1.9e-4
#:   to 8.3e-4 (median 2.6e-4); `--algo a3c --env CartPole-v1 --total-frames 200000`
#:   (return 217) 1.8e-4 to 3.1e-3 (median 6.1e-4);
#: - stalled: `gazelle train --env PongNoFrameskip-v4 --learning-rate 1e-6 --max-seconds
#:   180` 1.7e-5 to 3.2e-5 (median 2.6e-5); `--env CartPole-v1 --learning-rate 4e-6
#:   --total-frames 200000` (return 20, random play's) 3.3e-6 to 1.5e-5; `--algo a3c --env
#:   PongNoFrameskip-v4 --learning-rate 1e-7 --max-seconds 180` 3.7e-7 to 9.5e-7; the
#:   earlier session's RMSProp Pong ~4e-5; a torso of dead units
#:   (`tests/runtime_children.DeadTorso`) 0.
STALL_RATIO = 7e-5
#: Learning rates below this share of the initial one are not judged (see `StallWatch`).
MIN_LR_SCALE = 0.05


def parameter_groups(module: nn.Module) -> dict[str, list[nn.Parameter]]:
    """Trainable parameters by the name of the top-level child that holds them."""
    groups: dict[str, list[nn.Parameter]] = {}
    for name, param in module.named_parameters():
        if param.requires_grad:
            groups.setdefault(name.split(".", 1)[0], []).append(param)
    return groups


def grad_rms(groups: dict[str, list[nn.Parameter]]) -> dict[str, torch.Tensor]:
    """Per group, the RMS over its weights of their `.grad` (0-dim tensors; a group without
    gradients is left out)."""
    out: dict[str, torch.Tensor] = {}
    for group, params in groups.items():
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            squares = sum(g.detach().float().pow(2).sum() for g in grads)
            count = sum(g.numel() for g in grads)
            out[group] = torch.sqrt(torch.as_tensor(squares) / count)
    return out


class LayerStats:
    """Measures one optimiser step per group: call `before_step()` after the gradients are
    final (clipped), then `after_step()` once the optimiser has stepped."""

    def __init__(self, module: nn.Module) -> None:
        self.groups = parameter_groups(module)
        self._before: dict[str, list[torch.Tensor]] = {}
        self._grad_rms: dict[str, torch.Tensor] = {}

    def before_step(self) -> None:
        self._grad_rms = grad_rms(self.groups)
        for group, params in self.groups.items():
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
    """Warns once when the median of a group's update ratio over its last `patience` updates
    is below `threshold` (a torso that never starts to learn, or stops).

    The median, not "every update below": a torso pushed into saturation by one burst of
    large updates (A3C at 3x the seed's learning rate on Pong, docs/results.md) moved by a
    median of 5.6e-5 of its norm per update for 0.5M frames, but a few of its updates rose
    above the threshold, and a count of updates in a row never got there.

    `warn` receives one line; it is called again only after the median recovers and falls
    anew. `every`: each measured update stands for this many (the updates in between were
    not measured: A3C's workers measure one in `MEASURE_EVERY`).
    """

    def __init__(
        self,
        group: str = "torso",
        threshold: float = STALL_RATIO,
        patience: int = 500,
        warn: Callable[[str], None] = print,
        every: int = 1,
    ) -> None:
        self.group, self.threshold, self.patience, self.warn = group, threshold, patience, warn
        self.every = every
        # why: `every` updates per measured one, so the window holds patience/every of them.
        self._window: deque[float] = deque(maxlen=max(1, math.ceil(patience / every)))
        self._warned = False

    def update(self, metrics: dict[str, Any], updates: int, lr_scale: float = 1.0) -> bool:
        """Feed one update's metrics; returns True when it warned now.

        `lr_scale`: the learning rate of this update over the run's initial one. The ratio
        is judged at the initial rate (divided by it): Adam's and RMSProp's steps are
        proportional to the rate, so a rate decayed towards the end of a run is not a stall.
        Below `MIN_LR_SCALE` nothing is judged (nor counted). A non-finite ratio counts as
        below the threshold.
        """
        value = metrics.get(f"layers/update_ratio/{self.group}")
        if value is None or lr_scale < MIN_LR_SCALE:
            return False
        ratio = float(value) / lr_scale
        self._window.append(ratio if math.isfinite(ratio) else 0.0)
        if len(self._window) < (self._window.maxlen or 1):
            return False
        median = statistics.median(self._window)
        if median >= self.threshold:
            self._warned = False
            return False
        if self._warned:
            return False
        self._warned = True
        span = len(self._window) * self.every
        self.warn(
            f"gazelle: warning: the {self.group}'s weights have moved by less than "
            f"{self.threshold:g} of their norm per update for {span} updates (median "
            f"{median:.1e}, now {ratio:.1e}, at update {updates}): it is not learning. Check "
            "layers/grad_rms and layers/update_ratio in TensorBoard; usual causes: an "
            "optimiser epsilon larger than the gradients (--epsilon), a learning rate too "
            "small (--learning-rate), a head-dominated gradient clipped by --grad-norm-clip, "
            "or a learning rate so large that a burst of updates saturated the network (its "
            "layers' grad_rms fell)"
        )
        return True
