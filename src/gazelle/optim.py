"""Optimisers of the IMPALA seed, in PyTorch (the rate schedule: `gazelle.runtime.schedule`).

`RMSpropTF` is TensorFlow 1's `RMSPropOptimizer`, which the seed trains with. It differs from
`torch.optim.RMSprop` in two ways that matter with the seed's `epsilon=0.1`:

- epsilon is added *inside* the square root: `g / sqrt(ms + eps)` (torch: `g / (sqrt(ms) + eps)`);
- the mean square starts at 1, not 0 (so the first steps are not huge).

With momentum `m`: `mom = m * mom + lr * g / sqrt(ms + eps)`, `param -= mom`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class RMSpropTF(torch.optim.Optimizer):
    """TensorFlow-1-style RMSProp (see module docstring)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        decay: float = 0.9,
        momentum: float = 0.0,
        eps: float = 1e-10,
    ) -> None:
        if lr < 0 or not 0.0 <= decay <= 1.0 or momentum < 0 or eps < 0:
            raise ValueError(
                f"invalid RMSpropTF settings: lr={lr} decay={decay} momentum={momentum} eps={eps}"
            )
        super().__init__(params, dict(lr=lr, decay=decay, momentum=momentum, eps=eps))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, decay, momentum, eps = group["lr"], group["decay"], group["momentum"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if not state:
                    state["ms"] = torch.ones_like(p)
                    state["mom"] = torch.zeros_like(p)
                ms, mom = state["ms"], state["mom"]
                ms.mul_(decay).addcmul_(grad, grad, value=1.0 - decay)
                update = grad / (ms + eps).sqrt()
                if momentum > 0:
                    mom.mul_(momentum).add_(update, alpha=lr)
                    p.sub_(mom)
                else:
                    p.sub_(update, alpha=lr)
        return loss


def make_optimizer(
    kind: str, params: Iterable[Any], lr: float, decay: float, momentum: float, eps: float
) -> torch.optim.Optimizer:
    """`rmsprop_tf` (the seed's) or `rmsprop` (torch's, as torchbeast uses)."""
    if kind == "rmsprop_tf":
        return RMSpropTF(params, lr=lr, decay=decay, momentum=momentum, eps=eps)
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=decay, momentum=momentum, eps=eps)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, eps=eps)
    raise ValueError(f"optimizer: invalid value {kind!r}; allowed: rmsprop_tf | rmsprop | adam")
