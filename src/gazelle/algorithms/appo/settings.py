"""APPO's config section (`--algo appo`'s flags: IMPALA's and its passes) and its checks."""

from __future__ import annotations

from dataclasses import dataclass

from gazelle.algorithms.impala.settings import ImpalaConfig, validate_impala
from gazelle.config.errors import ConfigError
from gazelle.config.validation import Checks


@dataclass(frozen=True)
class AppoConfig(ImpalaConfig):
    """APPO: IMPALA's actors and V-trace targets, with PPO's clipped surrogate and several
    passes over each batch (`epochs` x `minibatches` optimiser steps per batch)."""

    epochs: int | None = None
    """Passes over each batch; unset: the preset's."""
    minibatches: int | None = None
    """Optimiser steps per pass, each on a disjoint share of the batch's unrolls (divides
    --batch-size); unset: the preset's."""
    clip_ratio: float | None = None
    """PPO's clip: the ratio pi/mu of the learner's to the actors' policy is clipped to
    [1 - clip, 1 + clip] in the surrogate; unset: the preset's."""
    clip_anchor: str | None = None
    """The policy the clipped ratio is taken to: behaviour (the actors' policy mu, whose lag
    the clip then bounds too) or learner (the learner's policy at the start of each batch's
    passes, the actors' lag corrected by the weight min(1, pi_start / mu): decoupled PPO);
    unset: the preset's (learner in the control preset, behaviour elsewhere)."""
    targets: str | None = None
    """Where the V-trace targets and advantages come from: step (the learner's current
    values and policy at every minibatch step, as IMPALA's loss) or batch (its values and
    policy before each batch's passes, fixed through the epochs, as PPO's GAE; the clip is
    then anchored at the learner, refused with --clip-anchor behaviour); unset: the
    preset's (step where no preset sets it). With --minibatch-unit step, step's targets
    are the learner's as each epoch starts."""
    minibatch_unit: str | None = None
    """What each pass deals into its minibatches: unroll (whole unrolls, any agent) or step
    (single steps drawn from every unroll, as PPO's minibatches; a feed-forward agent only,
    the V-trace targets then computed on the whole unrolls before each epoch); unset:
    unroll."""


def validate_appo(check: Checks) -> None:
    """IMPALA's checks, then APPO's passes and clip."""
    validate_impala(check)
    for name in ("epochs", "minibatches"):
        check.positive(name, allow_none=True)
    check.in_range("clip_ratio", 1e-6, 10.0, allow_none=True)
    check.choice("clip_anchor", ("behaviour", "learner"), allow_none=True)
    check.choice("targets", ("step", "batch"), allow_none=True)
    if check.value("targets") == "batch" and check.value("clip_anchor") == "behaviour":
        raise ConfigError(
            "targets",
            "batch",
            "step with --clip-anchor behaviour (batch takes the targets and the clip's "
            "anchor from the learner's policy before the passes: --clip-anchor learner)",
        )
    check.choice("minibatch_unit", ("unroll", "step"), allow_none=True)
    by_step = check.value("minibatch_unit") == "step"
    if by_step and check.value("use_lstm"):
        raise ConfigError(
            "minibatch_unit",
            "step",
            "unroll with the LSTM core (a step alone has no state to start from), or --no-use-lstm",
        )
    batch, parts = check.value("batch_size"), check.value("minibatches")
    length = check.value("unroll_length")
    if by_step:
        # why: a batch deals T x B steps; unset T or B: checked once the preset sets them.
        units = None if batch is None or length is None else batch * length
        flags, kind = "--batch-size x --unroll-length", "steps"
    else:
        units, flags, kind = batch, "--batch-size", "unrolls"
    if units is not None and parts is not None and units % parts:
        raise ConfigError("minibatches", parts, f"a divisor of {flags} ({units} {kind} per batch)")
    learners = check.value("learners")
    if units is not None and parts is not None and (units // parts) % learners:
        raise ConfigError(
            "minibatches",
            parts,
            f"one that leaves each minibatch a multiple of --learners ({learners}): "
            f"{flags} {units} / {parts} = {units // parts} {kind}",
        )
