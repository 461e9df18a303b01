"""APPO's loss on one minibatch of unrolls: V-trace targets from the learner's current
values (as IMPALA), PPO's clipped surrogate on the ratio to the actors' policy, and the
baseline and entropy terms (summed, as every loss of gazelle).

Per step t (after IMPALA's shift by one, `impala.loss.learner_view`):

    v_s          V-trace target of V(x_s), with lambda (`vtrace_lambda`)
    A_t        = r_t + gamma_t * v_{t+1} - V(x_t)          (v_T is the bootstrap V(x_T))
    A_t       <- (A_t - mean A) / (std A + 1e-8)          (with `normalize_advantages`)
    policy     = sum_t -min(r_t A_t, clip(r_t, 1 - c, 1 + c) A_t),  r_t = pi(a_t|x_t) / mu(a_t|x_t)
    baseline   = 0.5 * sum_t (v_t - V(x_t))^2
    loss       = policy + baseline_cost * baseline - entropy_cost * sum_t H(pi(.|x_t))

With `--popart`, A_t and v_s - V(x_s) are divided by the value head's sigma before the
normalisation and the squares (`impala.popart`).

The advantage is IMPALA's `pg_advantages` without V-trace's clipped rho in front: the ratio
is in the surrogate, where the clip bounds it (a V-trace advantage already weighed by
min(1, rho) would count the correction twice).

With the batch's `proximal_logits` (`--clip-anchor learner`: the learner's policy pi_0 at the
start of the batch's passes, `impala.loss.anchor_of`) the surrogate is decoupled PPO's
(Hilton et al. 2021): the ratio and its clip are taken to pi_0, and the actors' lag is
corrected by a truncated weight instead,

    policy     = sum_t -w_t min(r_t A_t, clip(r_t, 1 - c, 1 + c) A_t),
                 r_t = pi(a_t|x_t) / pi_0(a_t|x_t),  w_t = min(1, pi_0(a_t|x_t) / mu(a_t|x_t)),

so the clip bounds how far the passes move the policy, however old the actors' policy mu:
anchored at mu, a lag of L batches spends the clip range on the updates of the L batches
before (docs/notes/continuous.md).

Where the targets come from (`--targets`): `step` (IMPALA's loss at every step) computes
v_s and A_t above from the learner's current values and policy at each minibatch step;
`batch` computes them once per batch from the learner's values V_0 and policy pi_0 before
its passes (the batch's `PROXIMAL_VALUES` and `PROXIMAL_LOGITS`, PPO's practice: GAE on
the rollout's values, fixed through the epochs), so A_t = r_t + gamma_t * v_{t+1} - V_0(x_t)
and the value is fitted to fixed targets. With `step` the 10 epochs of the control preset
fit V to the batch's own returns and then measure the advantages with it; on Hopper-v5
(seed 1) the advantages after a batch's passes correlated 0.85-0.96 with those before
them. `batch` did not learn Hopper better (3 seeds at 1M frames: 794, 753 and 77 against
the preset's 393, 1,642 and 917; docs/notes/continuous.md), so `step` stays the default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gazelle.algorithms.impala.loss import (
    PROXIMAL_LOGITS,
    STEP_ADVANTAGES,
    STEP_VS,
    LossSettings,
    learner_view,
    normalized,
    td_targets,
)
from gazelle.algorithms.impala.popart import sigma_of
from gazelle.losses import actor_critic
from gazelle.losses.ppo import clipped_surrogate_loss
from gazelle.models.value import Reduce


@dataclass(frozen=True)
class AppoSettings:
    """APPO's loss hyperparameters: IMPALA's, plus the clip and the normalisation."""

    impala: LossSettings
    clip_ratio: float
    normalize_advantages: bool
    targets: str = "step"
    """`step`: v_s and A_t from the current values at each step; `batch`: from the values
    and policy before the batch's passes (`PROXIMAL_VALUES`, `PROXIMAL_LOGITS`)."""


def appo_loss(
    agent: Any,
    batch: dict[str, torch.Tensor],
    settings: AppoSettings,
    keep_targets: Callable[[torch.Tensor], None] | None = None,
    reduce: Reduce | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped-surrogate V-trace loss of a `[T+1, B]` batch (see the module docstring).

    Args:
        agent: `gazelle.models.Agent`.
        batch: the unroll fields, time-major, as IMPALA's loss takes them.
        settings: IMPALA's loss settings, the clip and whether to normalise advantages.
        keep_targets: given the V-trace targets `vs` `[T, B]` (PopArt's statistics).
        reduce: sums over the run's learners (`--learners N`), each holding a share of the
            minibatch: PopArt's statistics and the advantages' mean and std are the whole
            minibatch's (`impala.loss.normalized`), so each learner's gradient is its share
            of the one-learner gradient.
    """
    view = learner_view(agent, batch, settings.impala)
    log_probs = view.target_log_probs()
    if STEP_VS in batch:
        # why: steps dealt apart from their unrolls (`--minibatch-unit step`) carry the
        # targets taken on the whole unrolls (`sequence_targets`); V-trace needs those.
        vs, raw = batch[STEP_VS], batch[STEP_ADVANTAGES]
        behaviour = view.distribution.log_prob(view.behaviour_logits, view.actions)
        log_rhos = log_probs.detach() - behaviour
    else:
        fixed = settings.targets == "batch"
        targets, raw = td_targets(view, batch, settings.impala.vtrace_lambda, fixed, log_probs)
        vs, behaviour, log_rhos = targets.vs, targets.behaviour_action_log_probs, targets.log_rhos
    if keep_targets is not None:
        keep_targets(vs)
    # PopArt: both terms in units of the returns' spread (`impala.popart`); 1 without it.
    impala = settings.impala
    sigma = sigma_of(agent, vs, impala.popart_rate, view.level, reduce) if impala.popart else 1.0
    with torch.no_grad():
        advantages = raw / sigma
        raw_mean, raw_std = advantages.mean(), advantages.std()
        if settings.normalize_advantages:
            advantages = normalized(advantages, reduce)
    anchor, weights = behaviour, None
    if PROXIMAL_LOGITS in batch:
        with torch.no_grad():
            anchor = view.distribution.log_prob(batch[PROXIMAL_LOGITS], view.actions)
            # why: exp(log pi_0 - log mu), truncated at 1 as V-trace's rho.
            weights = torch.exp(anchor - behaviour).clamp(max=1.0)
    policy, policy_metrics = clipped_surrogate_loss(
        log_probs, anchor, advantages, settings.clip_ratio, weights
    )
    baseline, baseline_metrics = actor_critic.baseline_loss((vs - view.values) / sigma)
    entropy, entropy_metrics = actor_critic.entropy_loss(view.entropy())
    total = policy + impala.baseline_cost * baseline + impala.entropy_cost * entropy
    metrics = {
        **policy_metrics, **baseline_metrics, **entropy_metrics,
        "losses/total": total.detach(),
        "appo/advantage_mean": raw_mean,
        "appo/advantage_std": raw_std,
        "vtrace/kl_behaviour_target": (-log_rhos).mean(),
    }  # fmt: skip
    if weights is not None:
        metrics["appo/lag_weight_mean"] = weights.mean()
    # The two policy forces at ratio 1 (the surrogate's gradient before the ratio and the
    # clip): where the entropy term's is of the advantages' size, it steers the policy.
    metrics.update(view.logit_grad_norms(advantages, impala.entropy_cost))
    metrics.update(view.diagnostics(vs))
    return total, metrics
