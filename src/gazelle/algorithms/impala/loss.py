"""IMPALA's loss on one batch of unrolls: V-trace targets, then the actor-critic terms (the
seed's `build_learner`). The maths is in `gazelle.losses`; this module pairs the batch's
fields as the seed does (`learner_view`), which APPO's loss shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gazelle.algorithms.impala.popart import batch_levels, sigma_of
from gazelle.distributions import ActionDistribution
from gazelle.losses import actor_critic, vtrace
from gazelle.models.value import Reduce


@dataclass(frozen=True)
class LossSettings:
    """The loss hyperparameters of one run (see `gazelle.config.ImpalaConfig`)."""

    discounting: float
    baseline_cost: float
    entropy_cost: float
    reward_clipping: str
    vtrace_lambda: float = 1.0
    normalize_advantages: bool = False
    reward_scale: float = 1.0
    popart: bool = False
    popart_rate: float = 0.01


@dataclass(frozen=True)
class LearnerView:
    """A batch as the loss sees it after the shift by one: every field `[T, B]` (the
    policies' distribution parameters `[T, B, P]`, actions `[T, B, *actions.shape]`), step t
    pairing the learner's outputs on x_t with what followed it."""

    target_logits: torch.Tensor  # the learner's policy on x_t (gradients flow)
    values: torch.Tensor  # the learner's V(x_t) (gradients flow)
    bootstrap_value: torch.Tensor  # V(x_T), `[B]`
    actions: torch.Tensor  # a_t, taken by the actors
    behaviour_logits: torch.Tensor  # the actors' policy on x_t
    rewards: torch.Tensor  # r_t, clipped, plus the bootstrap of a cut episode
    discounts: torch.Tensor  # gamma, 0 where the episode ended after step t
    distribution: ActionDistribution  # the policy's family: log-probs, entropies
    level: torch.Tensor | None = None  # each unroll's level `[B]` (a value per level), or None

    def target_log_probs(self) -> torch.Tensor:
        """The learner's `log pi(a_t|x_t)`, `[T, B]` (gradients flow)."""
        return self.distribution.log_prob(self.target_logits, self.actions)

    def entropy(self) -> torch.Tensor:
        """The learner's policy entropy per step, `[T, B]` (gradients flow)."""
        return self.distribution.entropy(self.target_logits)

    def vtrace(
        self, lambda_: float = 1.0, target_log_probs: torch.Tensor | None = None
    ) -> vtrace.VTraceFromLogitsReturns:
        """V-trace targets of these steps (no gradient: targets are constants);
        `target_log_probs` (from `target_log_probs()`) saves computing them again."""
        with torch.no_grad():
            target = self.target_log_probs() if target_log_probs is None else target_log_probs
            return vtrace.from_action_log_probs(
                behaviour_action_log_probs=self.distribution.log_prob(
                    self.behaviour_logits, self.actions
                ),
                target_action_log_probs=target.detach(),
                discounts=self.discounts,
                rewards=self.rewards,
                values=self.values,
                bootstrap_value=self.bootstrap_value,
                lambda_=lambda_,
            )

    def diagnostics(self, vs: torch.Tensor) -> dict[str, torch.Tensor]:
        """`value/explained_variance`, `1 - var(vs - V) / var(vs)` over the batch (1: the
        values are the targets; 0: no better than their mean; the same in PopArt's units or
        the returns'), and the Gaussian components' statistics
        (`ActionDistribution.gaussian_stats`)."""
        with torch.no_grad():
            spread = vs.var()
            explained = 1.0 - (vs - self.values).var() / spread.clamp_min(1e-8)
        return {
            "value/explained_variance": explained,
            **self.distribution.gaussian_stats(self.target_logits, self.actions),
        }

    def logit_grad_norms(self, advantages: torch.Tensor, entropy_cost: float) -> dict:
        """The policy and entropy terms' gradient norms in the logits of one discrete action
        set (`actor_critic.logit_grad_norms`); {} for other action spaces."""
        if not self.distribution.spec.is_scalar:
            return {}
        return actor_critic.logit_grad_norms(
            self.target_logits, self.actions, advantages, entropy_cost
        )


def normalized(advantages: torch.Tensor, reduce: Reduce | None = None) -> torch.Tensor:
    """`advantages` `[T, B]` scaled to mean 0 and std 1 over the batch (no gradient). With
    `reduce` (`--learners N`: each learner holds a share of the batch), the mean and the
    (unbiased) std are the whole batch's, summed over the learners in two passes.

    why: the entropy term's weight is a fixed number, the policy term's size is the
    advantages'; on a dense reward (-1 per step, a return of -50 before the baseline has
    learned it) the policy term was ~1,000x the entropy term's and the policy went
    deterministic within ~100 updates (docs/results.md, "ViZDoom").
    """
    if reduce is None:
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    sums = torch.stack([advantages.new_tensor(float(advantages.numel())), advantages.sum()])
    reduce(sums)
    count, mean = sums[0], sums[1] / sums[0]
    # why: the second pass, around the whole batch's mean, as torch's std (no cancellation).
    squares = (advantages - mean).square().sum()
    reduce(squares)
    std = (squares / (count - 1).clamp(min=1)).sqrt()
    return (advantages - mean) / (std + 1e-8)


def _unroll(agent: Any, batch: dict[str, torch.Tensor]) -> tuple[Any, torch.Tensor | None]:
    """The agent's outputs over a `[T+1, B]` batch, and each unroll's level (or None)."""
    # why: the agent's obs spec names the batch's observation fields (every key it reads).
    obs = {name: batch[name] for name in agent.obs_spec.names}
    done = batch["terminated"] | batch["truncated"]
    state = (batch["state_h"], batch["state_c"]) if "state_h" in batch else ()
    level = batch_levels(agent, batch)
    # why: an agent without a value per level (any custom one) is called as before.
    levels = {} if level is None else {"level": level}
    learner_out, _ = agent.unroll(obs, batch["action"], batch["reward"], done, state, **levels)
    return learner_out, level


def anchor_of(agent: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The learner's policy and values on a `[T+1, B]` batch before its passes (no
    gradient), as batch fields: `PROXIMAL_LOGITS`, the policy on x_t for t = 0..T-1
    `[T, B, P]` (as `learner_view`'s `target_logits`: APPO's clip anchor), and
    `PROXIMAL_VALUES`, V(x_t) for t = 0..T `[T+1, B]` (APPO's `--targets batch`)."""
    with torch.no_grad():
        learner_out, _ = _unroll(agent, batch)
        # why: the shift by one of `learner_view`: the last step's policy pairs with no
        # action; its value is the bootstrap, so the values keep all T+1 steps.
        return {
            PROXIMAL_LOGITS: learner_out.policy_logits.float()[:-1],
            PROXIMAL_VALUES: learner_out.baseline.float(),
        }


#: The batch field of the learner's policy at the start of the batch's passes, `[T, B, P]`
#: (`anchor_of`; APPO with `--clip-anchor learner`).
PROXIMAL_LOGITS = "proximal_logits"
#: The batch field of the learner's values at the start of the batch's passes, `[T+1, B]`
#: (`anchor_of`; APPO with `--targets batch`).
PROXIMAL_VALUES = "proximal_values"


#: The batch fields of each step's V-trace target v_s and one-step advantage
#: r_t + gamma_t v_{t+1} - V(x_t), `[T, B]`, taken on the whole unrolls before the steps
#: are dealt into minibatches (`sequence_targets`; APPO's `--minibatch-unit step`).
STEP_VS = "step_vs"
STEP_ADVANTAGES = "step_advantages"


def td_targets(
    view: LearnerView,
    batch: dict[str, torch.Tensor],
    lambda_: float,
    fixed: bool,
    target_log_probs: torch.Tensor | None = None,
) -> tuple[vtrace.VTraceFromLogitsReturns, torch.Tensor]:
    """V-trace's targets of a view's `[T, B]` steps and the advantages
    `A_t = r_t + gamma_t * v_{t+1} - V(x_t)` `[T, B]` (v_T the bootstrap; no gradient),
    from the learner's current values and policy, or with `fixed` from those before the
    batch's passes (the batch's `PROXIMAL_VALUES` and `PROXIMAL_LOGITS`, `anchor_of`)."""
    start = view
    if fixed:
        if PROXIMAL_VALUES not in batch:
            raise ValueError(
                "--targets batch needs the batch's values before its passes "
                f"({PROXIMAL_VALUES!r}: APPO's --clip-anchor learner adds them)"
            )
        values = batch[PROXIMAL_VALUES]
        # why: the same shift by one as the learner's values: V_0(x_t) for t < T, then
        # V_0(x_T) the bootstrap; the target policy is pi_0, also fixed for the batch.
        start = dataclasses.replace(
            view, target_logits=batch[PROXIMAL_LOGITS], values=values[:-1],
            bootstrap_value=values[-1],
        )  # fmt: skip
        targets = start.vtrace(lambda_)
    else:
        targets = view.vtrace(lambda_, target_log_probs)
    with torch.no_grad():
        # why: v_{t+1} for t = 0..T-1 is vs shifted by one, the bootstrap closing the unroll.
        next_vs = torch.cat([targets.vs[1:], start.bootstrap_value.unsqueeze(0)], dim=0)
        advantages = view.rewards + view.discounts * next_vs - start.values
    return targets, advantages


def sequence_targets(
    agent: Any, batch: dict[str, torch.Tensor], settings: LossSettings, fixed: bool
) -> dict[str, torch.Tensor]:
    """`td_targets` of a `[T+1, B]` batch as the fields `STEP_VS` and `STEP_ADVANTAGES`
    `[T, B]`, so that its steps can be trained on apart from their unrolls (a feed-forward
    agent's; `passes.select_steps`)."""
    with torch.no_grad():
        view = learner_view(agent, batch, settings)
        targets, advantages = td_targets(view, batch, settings.vtrace_lambda, fixed)
    return {STEP_VS: targets.vs, STEP_ADVANTAGES: advantages}


def learner_view(agent: Any, batch: dict[str, torch.Tensor], settings: LossSettings) -> LearnerView:
    """Unroll the learner's agent over a `[T+1, B]` batch; pair the fields (`impala_loss`)."""
    learner_out, level = _unroll(agent, batch)
    logits = learner_out.policy_logits.float()
    baseline = learner_out.baseline.float()

    # why: the env outputs at t are the inputs that led to the learner outputs at t. After
    # the shift by one, the behaviour action/logits at t are what led to the env output
    # (reward, end of episode) at t+1, and the learner's value at t is V(x_t).
    rewards = actor_critic.clip_rewards(
        batch["reward"][1:] * settings.reward_scale, settings.reward_clipping
    )
    terminated, truncated = batch["terminated"][1:], batch["truncated"][1:]
    # A cut episode is bootstrapped from V(its last obs), computed by the actor when the cut
    # happened; a terminated one is not. Neither carries value across the episode boundary.
    rewards = rewards + settings.discounting * truncated.float() * batch["truncation_value"][1:]
    return LearnerView(
        target_logits=logits[:-1],
        values=baseline[:-1],
        bootstrap_value=baseline[-1],
        actions=batch["action"][1:],
        behaviour_logits=batch["policy_logits"][1:],
        rewards=rewards,
        discounts=(~(terminated | truncated)).float() * settings.discounting,
        distribution=agent.distribution,
        level=level,
    )


def in_sigma_units(
    agent: Any,
    values: torch.Tensor,
    targets: vtrace.VTraceFromLogitsReturns,
    rate: float,
    level: torch.Tensor | None = None,
    reduce: Reduce | None = None,
) -> tuple[torch.Tensor, vtrace.VTraceFromLogitsReturns]:
    """`values` `[T, B]`, the targets' `vs` and `pg_advantages` divided by the value head's
    sigma (PopArt, `gazelle.algorithms.impala.popart`; each unroll's level's, `level` `[B]`):
    (vs - v) / sigma is the normalised target minus the normalised value, (vs - mu) / sigma -
    n(x), whatever mu."""
    sigma = sigma_of(agent, targets.vs, rate, level, reduce)
    scaled = targets._replace(vs=targets.vs / sigma, pg_advantages=targets.pg_advantages / sigma)
    return values / sigma, scaled


def impala_loss(
    agent: Any,
    batch: dict[str, torch.Tensor],
    settings: LossSettings,
    keep_targets: Callable[[torch.Tensor], None] | None = None,
    reduce: Reduce | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The V-trace actor-critic loss of a `[T+1, B]` batch of unrolls (summed, as the seed).

    Args:
        agent: `gazelle.models.Agent` (its `unroll` gives logits and baselines `[T+1, B]`).
        batch: the unroll fields (`frame`, `action`, `reward`, `terminated`, `truncated`,
            `truncation_value`, `policy_logits` `[T+1, B, P]`, and `state_h`/`state_c`
            `[B, H]` with a core), time-major.
        settings: discount, loss weights, reward scale and clipping, V-trace's lambda,
            advantage normalisation and PopArt (both terms in units of the value head's sigma).
        keep_targets: given the V-trace targets `vs` `[T, B]` (PopArt's statistics).
        reduce: sums over the run's learners (`--learners N`), each holding a share of the
            batch: the batch's statistics (PopArt's, the advantages' normalisation) are then
            the whole batch's; the loss itself is a sum, so the learners' gradients add up.
    """
    view = learner_view(agent, batch, settings)
    log_probs = view.target_log_probs()
    targets = view.vtrace(settings.vtrace_lambda, log_probs)
    if keep_targets is not None:
        keep_targets(targets.vs)
    values, raw_vs = view.values, targets.vs
    if settings.popart:
        values, targets = in_sigma_units(
            agent, values, targets, settings.popart_rate, view.level, reduce
        )
    if settings.normalize_advantages:
        targets = targets._replace(pg_advantages=normalized(targets.pg_advantages, reduce))
    total, metrics = actor_critic.impala_loss(
        target_action_log_probs=log_probs,
        entropy=view.entropy(),
        vtrace_returns=targets,
        values=values,
        baseline_cost=settings.baseline_cost,
        entropy_cost=settings.entropy_cost,
    )
    metrics.update(view.logit_grad_norms(targets.pg_advantages, settings.entropy_cost))
    metrics.update(view.diagnostics(raw_vs))
    return total, metrics
