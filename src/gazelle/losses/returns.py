"""Discounted returns and generalised advantage estimation (GAE), as in the A3C seed.

The seed computes, for one rollout of `T` steps with bootstrap value `R` (0 when the rollout
ended its episode):

    returns    = discount(rewards + [R], gamma)[:-1]
    deltas     = rewards + gamma * values[1:] - values[:-1]      (values + [R])
    advantages = discount(deltas, gamma * lambda_)

`gae` generalises this to time-major batches `[T, B]` whose columns may hold several
episodes: `dones[t]` marks the last step of an episode, and nothing (reward, value or
advantage) is carried back across it. The seed's returns are the discounted rewards plus the
discounted bootstrap, not the TD(lambda) returns `advantages + values`; we keep that.
"""

from __future__ import annotations

from typing import TypeVar, overload

import numpy as np
import torch

from gazelle.losses._checks import (
    compute_dtype,
    require_min_dim,
    require_same_device,
    require_shape,
)

#: A numpy array or a torch tensor; functions taking one return the same kind.
ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, torch.Tensor)


def discount(x: ArrayOrTensor, gamma: float) -> ArrayOrTensor:
    """Discounted cumulative sum along axis 0: `y[t] = sum_k gamma^k x[t+k]`.

    Args:
        x: `[T, ...]` numpy array or torch tensor (integers are converted to float64 for numpy,
            to the default float dtype for torch).
        gamma: the discount.

    Returns:
        `[T, ...]`, the same kind (and device) as `x`.
    """
    if isinstance(x, torch.Tensor):
        values = x if x.is_floating_point() else x.to(torch.get_default_dtype())
        out_t = torch.empty_like(values)
        acc_t = torch.zeros_like(values[0]) if len(values) else values
        for t in range(len(values) - 1, -1, -1):
            acc_t = values[t] + gamma * acc_t
            out_t[t] = acc_t
        return out_t
    array = np.asarray(x)
    if not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    out_a = np.empty_like(array)
    acc_a = np.zeros_like(array[0]) if len(array) else array
    for t in range(len(array) - 1, -1, -1):
        acc_a = array[t] + gamma * acc_a
        out_a[t] = acc_a
    return out_a


def _to_tensor(x: object, dtype: torch.dtype | None, device: torch.device) -> torch.Tensor:
    """A tensor view of `x` (tensor, numpy array or number); numpy integers become float64."""
    if isinstance(x, torch.Tensor):
        return x if dtype is None else x.to(dtype)
    if isinstance(x, np.ndarray | np.generic):
        array = np.asarray(x)
        if dtype is None and not np.issubdtype(array.dtype, np.floating):
            array = array.astype(np.float64)
        tensor = torch.as_tensor(array, device=device)
        return tensor if dtype is None else tensor.to(dtype)
    return torch.as_tensor(x, dtype=dtype, device=device)


@overload
def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    bootstrap_value: np.ndarray | np.generic | float,
    gamma: float,
    lambda_: float,
    dones: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]: ...


@overload
def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor | float,
    gamma: float,
    lambda_: float,
    dones: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...


def gae(
    rewards: np.ndarray | torch.Tensor,
    values: np.ndarray | torch.Tensor,
    bootstrap_value: np.ndarray | np.generic | torch.Tensor | float,
    gamma: float,
    lambda_: float,
    dones: np.ndarray | torch.Tensor | None = None,
) -> tuple[np.ndarray, np.ndarray] | tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and discounted returns, exactly as the A3C seed's `process_rollout`.

    Args:
        rewards: `[T]` (one rollout) or time-major `[T, B]`.
        values: `V(x_t)`, same shape as `rewards`.
        bootstrap_value: `V(x_T)` after the last step: a scalar for `[T]`, `[B]` for `[T, B]`.
            Ignored where the last step is done.
        gamma: discount.
        lambda_: GAE mixing parameter (0: one-step TD errors, 1: Monte-Carlo advantages).
        dones: optional bool (or 0/1) `[T]` / `[T, B]`; `dones[t]` means step `t` was the
            last step of its episode, so step `t+1` belongs to a new episode.

    Returns:
        `(advantages, returns)`, both shaped like `rewards`, without gradient; numpy arrays if
        `rewards` is a numpy array, otherwise tensors on `rewards`' device.

    Raises:
        ValueError: on mismatched shapes or devices.
    """
    fn = "returns.gae"
    as_numpy = not isinstance(rewards, torch.Tensor)
    device = rewards.device if isinstance(rewards, torch.Tensor) else torch.device("cpu")
    rewards_t = _to_tensor(rewards, None, device)
    values_t = _to_tensor(values, None, device)
    bootstrap_is_tensor = isinstance(bootstrap_value, torch.Tensor | np.ndarray | np.generic)
    floats = [rewards_t, values_t]
    if bootstrap_is_tensor:
        floats.append(_to_tensor(bootstrap_value, None, device))
    dtype = compute_dtype(*floats)
    rewards_t, values_t = rewards_t.to(dtype), values_t.to(dtype)
    bootstrap_t = _to_tensor(bootstrap_value, dtype, device)

    require_min_dim(fn, "rewards", rewards_t, 1, "[T] or [T, B]")
    require_shape(fn, "values", values_t, rewards_t.shape, "the shape of `rewards`")
    require_shape(fn, "bootstrap_value", bootstrap_t, rewards_t.shape[1:], "`values` without time")
    require_same_device(fn, rewards=rewards_t, values=values_t, bootstrap_value=bootstrap_t)
    if dones is None:
        not_done = torch.ones_like(rewards_t)
    else:
        dones_t = _to_tensor(dones, None, device)
        require_shape(fn, "dones", dones_t, rewards_t.shape, "the shape of `rewards`")
        require_same_device(fn, rewards=rewards_t, dones=dones_t)
        not_done = 1.0 - dones_t.to(dtype)

    with torch.no_grad():
        rewards_t, values_t, bootstrap_t = (t.detach() for t in (rewards_t, values_t, bootstrap_t))
        # why: the successor value of step t is V(x_{t+1}), i.e. values shifted one step
        # earlier, with the bootstrap after the last step; zeroed where step t ended.
        next_values = torch.cat([values_t[1:], bootstrap_t.unsqueeze(0)], dim=0)
        deltas = rewards_t + gamma * not_done * next_values - values_t
        advantages = torch.empty_like(rewards_t)
        returns = torch.empty_like(rewards_t)
        adv_acc = torch.zeros_like(bootstrap_t)
        ret_acc = bootstrap_t
        for t in range(rewards_t.shape[0] - 1, -1, -1):
            adv_acc = deltas[t] + gamma * lambda_ * not_done[t] * adv_acc
            ret_acc = rewards_t[t] + gamma * not_done[t] * ret_acc
            advantages[t] = adv_acc
            returns[t] = ret_acc

    if as_numpy:
        return advantages.numpy(), returns.numpy()
    return advantages, returns
