"""IMPALA's config section (`--algo impala`'s flags) and its checks."""

from __future__ import annotations

from dataclasses import dataclass

from gazelle.config.errors import ConfigError
from gazelle.config.validation import OPTIMIZER_CHOICES, REWARD_CLIPPING_CHOICES, Checks


@dataclass(frozen=True)
class ImpalaConfig:
    """IMPALA's learner: V-trace actor-critic (the IMPALA seed's `build_learner`)."""

    preset: str = "gazelle"
    """Where unset values come from: gazelle (defaults measured to learn fast, see
    docs/results.md) or impala-paper (the IMPALA paper's Atari learner settings and the
    seed's DMLab flags: optimiser, lr, epsilon, entropy, batch, unroll, LSTM; not its actors,
    torso (auto: shallow on a CPU) or frame budget, see docs/usage.md)."""
    batch_size: int | None = None
    """Unrolls per learner batch (seed: 2 on DMLab)."""
    unroll_length: int | None = None
    """Agent steps per unroll, T (seed: 100)."""
    learning_rate: float | None = None
    """Initial learning rate, decayed linearly to 0 over total_frames (seed: 0.00048)."""
    optimizer: str | None = None
    """rmsprop_tf: TensorFlow's RMSProp as in the seed (eps inside the sqrt); rmsprop:
    torch's; adam: torch's Adam."""
    decay: float = 0.99
    """RMSProp decay (seed: 0.99)."""
    momentum: float = 0.0
    """RMSProp momentum (seed: 0)."""
    epsilon: float | None = None
    """Optimiser epsilon (seed: 0.1 with rmsprop_tf)."""
    entropy_cost: float | None = None
    """Weight of the entropy term (seed: 0.00025)."""
    baseline_cost: float = 0.5
    """Weight of the baseline loss (seed: 0.5)."""
    discounting: float = 0.99
    """Discount factor gamma (seed: 0.99)."""
    reward_clipping: str | None = None
    """abs_one | soft_asymmetric | none (seed: abs_one); unset: the preset's (abs_one, the
    seed's; ViZDoom and continuous control: none, with --popart)."""
    reward_scale: float = 1.0
    """Multiply the rewards by this before clipping them (the seed: 1); for rewards paid
    every step, whose returns are tens or hundreds (ViZDoom's scenarios)."""
    grad_norm_clip: float | None = 40.0
    """Clip the global gradient norm; None for no clipping (the seed does not clip)."""
    max_policy_lag: int | None = None
    """Drop unrolls whose policy is older than this many learner updates; None keeps all."""
    vtrace_lambda: float | None = None
    """V-trace's lambda (c_t = lambda * min(1, rho_t), the paper's Remark 2): 1 is the seed's;
    lower trades the targets' variance for bias; unset: the preset's."""
    normalize_advantages: bool | None = None
    """Scale the policy term's advantages to mean 0, std 1 over each batch (APPO: each
    minibatch; PPO's practice), so the entropy weight means the same whatever the reward
    scale; unset: the preset's (IMPALA: the seed's unscaled V-trace advantages)."""
    lstm_lr_scale: float | None = None
    """With the LSTM core: the learning rate of the core and of the policy head, as a
    multiple of --learning-rate (the rest of the agent takes the whole rate). An RMSProp or
    Adam step moves each weight by about the same amount, so a layer's output moves with
    the summed size of its inputs: the LSTM's 256 outputs, mostly near +-1, moved the
    policy 10-50x as far per update as the memoryless agent's, and CartPole's policy
    collapsed over and over (docs/notes/lstm.md). Unset: the preset's (0.1 in IMPALA's
    vector preset; 1, the seed's, elsewhere)."""
    popart: bool | None = None
    """PopArt (Hessel et al. 2019): the value head learns the returns in units of their
    running standard deviation and the advantages are divided by it, for rewards whose
    returns are far from 1 (tens or hundreds: ViZDoom's per-step rewards); unset: the
    preset's (on for ViZDoom and continuous control, with unclipped rewards; off elsewhere:
    the seed's)."""
    popart_rate: float = 0.01
    """PopArt's step size: the returns' mean and mean square move this far towards each
    batch's V-trace targets per update (after the first updates, which average the batches
    plainly; docs/algorithms.md)."""


def validate_impala(check: Checks) -> None:
    """Every field of the section (its `--preset` is checked against the presets before)."""
    check.choice("reward_clipping", REWARD_CLIPPING_CHOICES, allow_none=True)
    check.choice("optimizer", OPTIMIZER_CHOICES, allow_none=True)
    for name in ("batch_size", "unroll_length", "max_policy_lag"):
        check.positive(name, allow_none=True)
    for name in ("learning_rate", "epsilon", "grad_norm_clip"):
        check.positive(name, integer=False, allow_none=True)
    for name in ("decay", "momentum", "discounting"):
        check.in_range(name, 0.0, 1.0)
    check.in_range("baseline_cost", 0.0, 1e6)
    check.in_range("entropy_cost", 0.0, 1e6, allow_none=True)
    check.in_range("vtrace_lambda", 0.0, 1.0, allow_none=True)
    check.positive("lstm_lr_scale", integer=False, allow_none=True)
    check.in_range("lstm_lr_scale", 0.0, 1e3, allow_none=True)
    check.positive("reward_scale", integer=False)
    check.positive("popart_rate", integer=False)
    check.in_range("popart_rate", 0.0, 1.0)
    learners, batch = check.value("learners"), check.value("batch_size")
    if isinstance(learners, int) and learners > 1:
        if batch is not None and batch % learners:
            raise ConfigError(
                "batch_size", batch, f"a multiple of --learners ({learners}: each takes 1/N)"
            )
        if check.value("max_policy_lag") is not None:
            # why: a batch with stale unrolls dropped would not split evenly (not done yet)
            raise ConfigError(
                "max_policy_lag", check.value("max_policy_lag"), f"unset with --learners {learners}"
            )
