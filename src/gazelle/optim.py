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


def param_groups(agent: torch.nn.Module, lstm_lr_scale: float) -> list[dict[str, Any]]:
    """The agent's parameters as optimiser groups, each with its `lr_scale` (the learner
    steps a group at `learning_rate * lr_scale`): an agent with an LSTM core gets two, the
    core and the policy head at `lstm_lr_scale` first, then the rest at 1 (two whatever the
    scale, so that a run resumed with another scale loads its optimiser state); one without
    gets one. Each group keeps `agent.parameters()`' order."""
    if getattr(agent, "core", None) is None:
        return [{"params": list(agent.parameters()), "lr_scale": 1.0}]
    parts: list[torch.nn.Module] = [agent.core, agent.policy]  # type: ignore[list-item]
    scaled = {id(p) for part in parts for p in part.parameters()}
    params = list(agent.parameters())
    return [
        {"params": [p for p in params if id(p) in scaled], "lr_scale": float(lstm_lr_scale)},
        {"params": [p for p in params if id(p) not in scaled], "lr_scale": 1.0},
    ]


def regroup_state(
    state: dict[str, Any], optimizer: torch.optim.Optimizer, agent: torch.nn.Module
) -> dict[str, Any]:
    """An optimiser state saved with one group of `agent.parameters()` (before
    `param_groups` split them) laid out as `optimizer`'s groups, each parameter's moments
    kept; a state with as many groups as `optimizer` is returned as it is."""
    groups = state["param_groups"]
    if len(groups) == len(optimizer.param_groups) or len(groups) != 1:
        return state
    # why: torch numbers a state's parameters through its groups in order; the saved one
    # group held `agent.parameters()` in order, so index i there is that list's i-th.
    old_index = {id(p): i for i, p in enumerate(agent.parameters())}
    new_state, new_groups, j = {}, [], 0
    for group in optimizer.param_groups:
        indices = []
        for p in group["params"]:
            i = old_index[id(p)]
            if i in state["state"]:
                new_state[j] = state["state"][i]
            indices.append(j)
            j += 1
        new_groups.append({**groups[0], "params": indices, "lr_scale": group["lr_scale"]})
    return {"state": new_state, "param_groups": new_groups}
