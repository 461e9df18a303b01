"""PPO's clipped surrogate policy loss (Schulman et al., 2017), for several passes over one
batch of an actor-learner system's unrolls. APPO takes the ratio either to the actors' own
policy (the clip then bounds both the policy lag and the drift of the passes) or to the
learner's policy at the start of the batch's passes, with the actors' lag corrected by a
weight per step (`weights`: decoupled PPO, Hilton et al. 2021, "Batch size-invariance for
policy optimization").

Like every loss of `gazelle.losses` it is a *sum* over time and batch and returns
`(loss, metrics)` with detached 0-dim tensors:

- `losses/policy`: the surrogate term;
- `ppo/clip_fraction`: the fraction of steps whose ratio lies outside `[1 - clip, 1 + clip]`;
- `ppo/ratio_mean`, `ppo/approx_kl`: the mean ratio and `mean((r - 1) - log r)`, an unbiased,
  never negative estimate of KL(mu || pi) from mu's actions.
"""

from __future__ import annotations

import torch

from gazelle.losses._checks import require_float, require_shape

Metrics = dict[str, torch.Tensor]


def clipped_surrogate_loss(
    target_action_log_probs: torch.Tensor,
    behaviour_action_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """`sum_{t,b} -w min(r A, clip(r, 1 - clip, 1 + clip) A)`, `r = pi(a|x) / mu(a|x)`,
    `w` = `weights` (1 without).

    Where the clip binds (`r > 1 + clip` with `A > 0`, or `r < 1 - clip` with `A < 0`) the
    step's gradient is 0; elsewhere it is `-A grad r`, which at `r = 1` is the policy
    gradient `-A grad log pi`.

    Args:
        target_action_log_probs: the learner's `log pi(a_t|x_t)` of the actions taken,
            `[T, B]` (summed over an action's components); gradients flow.
        behaviour_action_log_probs: `log mu(a_t|x_t)` of the policy the ratio is taken to
            (the one the actions were drawn from, or the anchor of decoupled PPO), `[T, B]`;
            no gradient flows into it.
        advantages: `[T, B]`; no gradient flows into them.
        clip: the clip range epsilon (> 0).
        weights: per-step weights `[T, B]` (decoupled PPO: `min(1, anchor / behaviour)` of
            the action taken); no gradient flows into them.

    Returns:
        `(loss, metrics)` with the names in this module's docstring.
    """
    fn = "ppo.clipped_surrogate_loss"
    require_float(
        fn,
        target_action_log_probs=target_action_log_probs,
        behaviour_action_log_probs=behaviour_action_log_probs,
        advantages=advantages,
    )
    shape = target_action_log_probs.shape
    require_shape(fn, "behaviour_action_log_probs", behaviour_action_log_probs, shape,
                  "`target_action_log_probs`' shape")  # fmt: skip
    require_shape(fn, "advantages", advantages, shape, "`target_action_log_probs`' shape")
    if weights is not None:
        require_float(fn, weights=weights)
        require_shape(fn, "weights", weights, shape, "`target_action_log_probs`' shape")
    if not clip > 0:
        raise ValueError(f"{fn}: clip must be > 0; got {clip!r}")
    log_ratio = target_action_log_probs - behaviour_action_log_probs.detach()
    ratio = torch.exp(log_ratio)
    advantages = advantages.detach()
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    if weights is not None:
        surrogate = weights.detach() * surrogate
    loss = -torch.sum(surrogate)
    with torch.no_grad():
        outside = (ratio < 1.0 - clip) | (ratio > 1.0 + clip)
        metrics = {
            "losses/policy": loss.detach(),
            "ppo/clip_fraction": outside.to(ratio.dtype).mean(),
            "ppo/ratio_mean": ratio.mean(),
            "ppo/approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        }
    return loss, metrics
