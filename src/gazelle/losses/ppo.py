"""PPO's clipped surrogate policy loss (Schulman et al., 2017), for several passes over one
batch of an actor-learner system's unrolls (APPO: the ratio is taken to the actors' own
policy, so the clip bounds both the policy lag and the drift of the passes).

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
) -> tuple[torch.Tensor, Metrics]:
    """`sum_{t,b} -min(r A, clip(r, 1 - clip, 1 + clip) A)`, `r = pi(a|x) / mu(a|x)`.

    Where the clip binds (`r > 1 + clip` with `A > 0`, or `r < 1 - clip` with `A < 0`) the
    step's gradient is 0; elsewhere it is `-A grad r`, which at `r = 1` is the policy
    gradient `-A grad log pi`.

    Args:
        target_action_log_probs: the learner's `log pi(a_t|x_t)` of the actions taken,
            `[T, B]` (summed over an action's components); gradients flow.
        behaviour_action_log_probs: `log mu(a_t|x_t)` of the policy the actions were drawn
            from, `[T, B]`; no gradient flows into it.
        advantages: `[T, B]`; no gradient flows into them.
        clip: the clip range epsilon (> 0).

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
    if not clip > 0:
        raise ValueError(f"{fn}: clip must be > 0; got {clip!r}")
    log_ratio = target_action_log_probs - behaviour_action_log_probs.detach()
    ratio = torch.exp(log_ratio)
    advantages = advantages.detach()
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
    loss = -torch.sum(torch.minimum(unclipped, clipped))
    with torch.no_grad():
        outside = (ratio < 1.0 - clip) | (ratio > 1.0 + clip)
        metrics = {
            "losses/policy": loss.detach(),
            "ppo/clip_fraction": outside.to(ratio.dtype).mean(),
            "ppo/ratio_mean": ratio.mean(),
            "ppo/approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        }
    return loss, metrics
