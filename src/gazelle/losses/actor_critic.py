"""Actor-critic loss terms (IMPALA and A3C seeds) and reward clipping.

Every loss is a *sum* over time and batch, as in both seeds (divide by the number of steps
outside if a mean is wanted), and returns `(loss, metrics)`. Metric values are detached 0-dim
tensors on the loss' device, not Python floats, so computing them never forces a GPU sync;
the logger converts them when it writes. Metric names are stable:

The policy terms take log-probabilities and entropies per step, `[T, B]` (summed over an
action's components by `gazelle.distributions`), so they hold for any action space; they
never see a space or a distribution.

- `losses/policy`, `losses/baseline`, `losses/entropy`: the terms as defined below (the
  entropy term is minus the entropy, `sum p log p` for a softmax), `losses/total`: the
  weighted sum;
- `policy/entropy`: the mean per-step entropy of the policy (positive, in nats);
- `policy/pg_logit_grad_norm`, `policy/entropy_logit_grad_norm` (one discrete action set):
  the global norms of the policy term's and the weighted entropy term's gradients in the
  logits (`logit_grad_norms`): which of the two pulls the policy harder;
- `vtrace/pg_advantage_mean` and, given from-logits V-trace output, `vtrace/rho_mean`,
  `vtrace/rho_above_1` (the fraction of steps whose ratio the default clip at 1 cuts) and
  `vtrace/kl_behaviour_target` (`mean(-log rho)`: an unbiased estimate of KL(mu || pi) from
  the actions mu took, i.e. how far the learner's policy moved during the policy lag; the
  mean rho is 1 under mu whatever that distance, so it cannot show it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gazelle.losses._checks import (
    require_float,
    require_int,
    require_min_dim,
    require_same_device,
    require_shape,
)
from gazelle.losses.vtrace import VTraceFromLogitsReturns, VTraceReturns

#: Metric name -> detached 0-dim tensor.
Metrics = dict[str, torch.Tensor]

#: Allowed `mode`s of `clip_rewards`.
REWARD_CLIPPING_MODES = ("abs_one", "soft_asymmetric", "none")


def _check_policy_inputs(fn: str, action_log_probs: torch.Tensor, entropy: torch.Tensor) -> None:
    require_float(fn, action_log_probs=action_log_probs, entropy=entropy)
    require_min_dim(fn, "action_log_probs", action_log_probs, 1, "[T, B] (or [T])")
    require_shape(fn, "entropy", entropy, action_log_probs.shape, "`action_log_probs`' shape")
    require_same_device(fn, action_log_probs=action_log_probs, entropy=entropy)


def policy_gradient_loss(
    action_log_probs: torch.Tensor, advantages: torch.Tensor
) -> tuple[torch.Tensor, Metrics]:
    """`sum_{t,b} -log pi(a_t|x_t) * stop_gradient(A_t)`.

    For a softmax policy its gradient in the logits is `(softmax(logits) - onehot(a)) * A`.

    Args:
        action_log_probs: `log pi(a_t|x_t)` of the actions taken, `[T, B]` (any shape), summed
            over an action's components (`gazelle.distributions`); gradients flow.
        advantages: shaped like `action_log_probs`; no gradient flows into them.

    Returns:
        `(loss, {"losses/policy": ...})`, loss a 0-dim tensor.
    """
    fn = "actor_critic.policy_gradient_loss"
    require_float(fn, action_log_probs=action_log_probs, advantages=advantages)
    require_shape(fn, "advantages", advantages, action_log_probs.shape, "`action_log_probs`' shape")
    require_same_device(fn, action_log_probs=action_log_probs, advantages=advantages)
    loss = torch.sum(-action_log_probs * advantages.detach())
    return loss, {"losses/policy": loss.detach()}


def baseline_loss(advantages: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """`0.5 * sum_{t,b} A_t^2`, so that `d loss / d V = -(target - V)` for `A = target - V`.

    Args:
        advantages: `target - values`, `[T, B]` (any shape); the gradient flows through.

    Returns:
        `(loss, {"losses/baseline": ...})`.
    """
    require_float("actor_critic.baseline_loss", advantages=advantages)
    loss = 0.5 * torch.sum(advantages**2)
    return loss, {"losses/baseline": loss.detach()}


def entropy_loss(entropy: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """`-sum_{t,b} H(pi(.|x_t))` (for a softmax policy `sum p log p`): minimising it
    maximises the entropy.

    Args:
        entropy: the policy's entropy per step, `[T, B]` (any shape; `gazelle.distributions`);
            gradients flow.

    Returns:
        `(loss, {"losses/entropy": loss, "policy/entropy": mean per-step entropy})`.
    """
    require_float("actor_critic.entropy_loss", entropy=entropy)
    loss = -torch.sum(entropy)
    metrics = {"losses/entropy": loss.detach(), "policy/entropy": entropy.detach().mean()}
    return loss, metrics


def logit_grad_norms(
    logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor, entropy_coef: float
) -> Metrics:
    """For a softmax policy (one discrete action set): the global (Frobenius) norms of two
    loss terms' gradients in the logits, from their closed forms (no autograd), with
    `p = softmax(logits)` and `H` the entropy per step:

    - the policy term `sum -log pi(a) * A`: `A * (p - onehot(a))`;
    - the weighted entropy term `entropy_coef * sum p log p`:
      `entropy_coef * p * (log p + H)`.

    Where the second is of the first's size or larger, the entropy bonus, not the advantages,
    steers the policy (towards uniform).

    Args:
        logits: policy logits `[T, B, A]` (any `[..., A]`).
        actions: integer actions `[T, B]`.
        advantages: `[T, B]`.
        entropy_coef: the entropy term's weight.

    Returns:
        `{"policy/pg_logit_grad_norm", "policy/entropy_logit_grad_norm"}`, detached 0-dim.
    """
    fn = "actor_critic.logit_grad_norms"
    require_min_dim(fn, "logits", logits, 2, "[T, B, A] (or [T, A])")
    require_int(fn, actions=actions)
    require_shape(fn, "actions", actions, logits.shape[:-1], "the logits without actions")
    # why: half-precision logits are measured in float32, float64 ones as they are.
    dtype = torch.promote_types(logits.dtype, torch.float32)
    with torch.no_grad():
        log_p = F.log_softmax(logits.detach().to(dtype), dim=-1)
        p = torch.exp(log_p)
        onehot = F.one_hot(actions, logits.shape[-1]).to(dtype)
        pg = advantages.detach().to(dtype).unsqueeze(-1) * (p - onehot)
        entropy = -(p * log_p).sum(-1, keepdim=True)
        ent = entropy_coef * p * (log_p + entropy)
        return {
            "policy/pg_logit_grad_norm": torch.linalg.vector_norm(pg),
            "policy/entropy_logit_grad_norm": torch.linalg.vector_norm(ent),
        }


def impala_loss(
    target_action_log_probs: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    vtrace_returns: VTraceReturns | VTraceFromLogitsReturns,
    *,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.00025,
) -> tuple[torch.Tensor, Metrics]:
    """The IMPALA learner's loss: `pg + baseline_cost * baseline + entropy_cost * entropy`.

    Args:
        target_action_log_probs: the learner's `log pi(a_t|x_t)` of the actions taken,
            `[T, B]`; gradients flow.
        entropy: the learner's policy entropy per step, `[T, B]`; gradients flow.
        values: the learner's baseline `V(x_t)`, `[T, B]`.
        vtrace_returns: output of `vtrace.from_action_log_probs` (or `from_logits`,
            `from_importance_weights`) for these steps: `vs` is the baseline's target,
            `pg_advantages` weigh the policy term.
        baseline_cost: weight of the baseline term (seed default 0.5).
        entropy_cost: weight of the entropy term (seed default 0.00025).

    Returns:
        `(total, metrics)` with the names listed in this module's docstring (the logit
        gradient norms are the caller's: `logit_grad_norms`).
    """
    fn = "actor_critic.impala_loss"
    _check_policy_inputs(fn, target_action_log_probs, entropy)
    require_float(fn, values=values)
    require_shape(fn, "values", values, entropy.shape, "the shape of `entropy`")
    require_shape(fn, "vtrace_returns.vs", vtrace_returns.vs, values.shape, "`values`' shape")
    pg, pg_metrics = policy_gradient_loss(target_action_log_probs, vtrace_returns.pg_advantages)
    baseline, baseline_metrics = baseline_loss(vtrace_returns.vs.detach() - values)
    entropy_term, entropy_metrics = entropy_loss(entropy)
    total = pg + baseline_cost * baseline + entropy_cost * entropy_term
    metrics = {**pg_metrics, **baseline_metrics, **entropy_metrics, "losses/total": total.detach()}
    metrics["vtrace/pg_advantage_mean"] = vtrace_returns.pg_advantages.detach().mean()
    if isinstance(vtrace_returns, VTraceFromLogitsReturns):
        log_rhos = vtrace_returns.log_rhos.detach()
        metrics["vtrace/rho_mean"] = torch.exp(log_rhos).mean()
        metrics["vtrace/rho_above_1"] = (log_rhos > 0).to(log_rhos.dtype).mean()
        metrics["vtrace/kl_behaviour_target"] = (-log_rhos).mean()
    return total, metrics


def a3c_loss(
    action_log_probs: torch.Tensor,
    entropy: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
) -> tuple[torch.Tensor, Metrics]:
    """The A3C seed's loss: `pi_loss + value_coef * vf_loss - entropy_coef * entropy`.

    With `vf_loss = 0.5 * sum (V - R)^2` and `entropy = sum H(pi(.|x_t))`, i.e. in this
    module's terms `policy + value_coef * baseline + entropy_coef * entropy_term`.

    Args:
        action_log_probs: `log pi(a_t|x_t)` of the actions taken, `[T]` (one rollout) or
            `[T, B]` (the seed feeds one-hot actions to a softmax: the same number).
        entropy: the policy's entropy per step, shaped like `action_log_probs`.
        advantages: GAE advantages, shaped alike; no gradient flows into them.
        returns: discounted returns `R`, shaped alike; no gradient flows into them.
        values: the value estimates `V(x_t)`, shaped alike.
        value_coef: weight of the value loss (seed: 0.5).
        entropy_coef: weight of the entropy bonus (seed: 0.01).

    Returns:
        `(total, metrics)` with the names listed in this module's docstring.
    """
    fn = "actor_critic.a3c_loss"
    _check_policy_inputs(fn, action_log_probs, entropy)
    require_float(fn, returns=returns, values=values)
    require_shape(fn, "returns", returns, entropy.shape, "the shape of `entropy`")
    require_shape(fn, "values", values, entropy.shape, "the shape of `entropy`")
    pg, pg_metrics = policy_gradient_loss(action_log_probs, advantages)
    value, value_metrics = baseline_loss(values - returns.detach())
    entropy_term, entropy_metrics = entropy_loss(entropy)
    total = pg + value_coef * value + entropy_coef * entropy_term
    metrics = {**pg_metrics, **value_metrics, **entropy_metrics, "losses/total": total.detach()}
    return total, metrics


def clip_rewards(rewards: torch.Tensor, mode: str) -> torch.Tensor:
    """Reward clipping of the IMPALA seed.

    Args:
        rewards: raw rewards, any shape.
        mode: `abs_one`: clip to [-1, 1]; `soft_asymmetric`: `5 * tanh(r / 5)`, with negative
            rewards further scaled by 0.3; `none`: unchanged.

    Returns:
        The clipped rewards, same shape, dtype and device.

    Raises:
        ValueError: for an unknown `mode`.
    """
    if mode == "abs_one":
        return torch.clamp(rewards, -1.0, 1.0)
    if mode == "soft_asymmetric":
        squeezed = torch.tanh(rewards / 5.0)
        # Negative rewards are weighted less than positive ones.
        return torch.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
    if mode == "none":
        return rewards
    raise ValueError(
        f"clip_rewards: unknown mode {mode!r}; allowed: {', '.join(REWARD_CLIPPING_MODES)}"
    )
