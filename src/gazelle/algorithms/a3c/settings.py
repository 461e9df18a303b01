"""A3C's config section (`--algo a3c`'s flags) and its checks."""

from __future__ import annotations

from dataclasses import dataclass

from gazelle.config.errors import ConfigError
from gazelle.config.validation import REWARD_CLIPPING_CHOICES, Checks

ADVANTAGE_VALUES_CHOICES = ("acting", "synced")


@dataclass(frozen=True)
class A3CConfig:
    """A3C (the universe-starter-agent seed): asynchronous workers, each with a runner thread
    filling a queue of partial rollouts, GAE, and a shared Adam on the global network.

    Four fields set where gazelle's A3C may differ from the seed's agent (docs/algorithms.md):
    `last_action_reward`, `--init` (the model section's), `advantage_values` and
    `end_rollout_at_episode_end`; `--preset universe-starter` sets all four the seed's way."""

    preset: str = "gazelle"
    """Where unset values come from: gazelle (gazelle's A3C agent, chosen point by point on
    Pong; docs/algorithms.md says where it differs from the seed) or
    universe-starter (the universe-starter-agent's agent: the LSTM fed by the conv features
    alone, its initialisation, advantages from acting-time values, rollouts that end at an
    episode's end, Adam 1e-4 constant, clip 40)."""
    unroll_length: int = 20
    """Steps per partial rollout (the seed's num_local_steps: 20)."""
    learning_rate: float | None = None
    """Adam's learning rate; unset: the env family's preset (Atari: 2e-4, the seed's 1e-4
    with --preset universe-starter)."""
    learning_rate_decay: bool | None = None
    """Decay the learning rate linearly to 0 over total_frames (the A3C paper) instead of
    keeping it constant (the starter agent); unset: the env family's preset."""
    lstm_lr_scale: float | None = None
    """With the LSTM core: the shared Adam steps the core and the policy head at this
    multiple of the learning rate (the rest of the agent at the whole rate), as IMPALA's
    --lstm-lr-scale does: Adam moves each weight by about the rate, so a layer reading the
    LSTM's 256 outputs moves the policy far more per update than one reading the memoryless
    torso's 64, and CartPole's policy collapsed with the LSTM (docs/notes/lstm.md). Unset:
    the preset's (1, the seed's one rate, in every A3C preset)."""
    epsilon: float = 1e-8
    """Adam's epsilon (TensorFlow's default, as in the seed)."""
    discounting: float = 0.99
    """Discount factor gamma (seed: 0.99)."""
    gae_lambda: float = 1.0
    """GAE's lambda (seed: 1.0)."""
    entropy_cost: float = 0.01
    """Weight of the entropy bonus (seed: 0.01)."""
    baseline_cost: float = 0.5
    """Weight of the value loss (seed: 0.5)."""
    grad_norm_clip: float | None = None
    """Clip each worker's gradient to this global norm; inf: no clipping; unset: the env
    family's preset (Atari: 15, the seed's 40 with --preset universe-starter; DMLab and
    images: 40; vector tasks: none)."""
    reward_clipping: str = "none"
    """abs_one | soft_asymmetric | none (seed: none)."""
    reward_scale: float = 1.0
    """Multiply the rewards by this before clipping them (the seed: 1), as IMPALA's
    --reward-scale."""
    queue_size: int = 5
    """Partial rollouts the runner thread may queue ahead of the trainer (seed: 5)."""
    last_action_reward: bool | None = None
    """Feed the LSTM the clipped last reward and the one-hot last action besides the torso's
    features (the IMPALA agent's inputs); off: the features alone, as the seed's LSTM;
    unset: the preset's (gazelle: on; universe-starter: off)."""
    advantage_values: str | None = None
    """Values that the returns and advantages are computed from: acting (the values and the
    bootstrap V(x_T) the runner computed when it acted, the seed's rollout.values and
    rollout.r) or synced (recomputed by the local network just synced with the global one);
    unset: the preset's (gazelle: synced; universe-starter: acting)."""
    end_rollout_at_episode_end: bool | None = None
    """End a partial rollout at the step that ends an episode (of any of the worker's envs),
    as the seed's runner does; off: always --unroll-length steps, across episode ends (masked
    by done); unset: the preset's (universe-starter: on; gazelle: on, off on vector tasks,
    whose 4 envs per worker would cut rollouts at every short episode)."""


def validate_a3c(check: Checks) -> None:
    """Every field of the section (its `--preset` is checked against the presets before)."""
    if check.value("normalize_obs"):
        # why: IMPALA's learner moves the statistics once per batch; A3C has no learner,
        # each worker computes its own gradient, and nothing would move them: the agent
        # would only clip its raw inputs at +-5 (docs/notes/continuous.md).
        raise ConfigError(
            "normalize_obs", True, "off with --algo a3c (not implemented there: use appo or impala)"
        )
    learners = check.value("learners")
    if learners != 1:
        # why: each A3C worker computes its gradients and applies them to the global
        # network itself: the workers already are its parallel learners.
        raise ConfigError(
            "learners",
            learners,
            "1 with --algo a3c (its workers are its parallel learners: set their number "
            "with --num-actors), or --algo impala | appo",
        )
    groups = check.value("env_groups")
    if groups not in (None, 1):
        # why: A3C's workers act with their own copy of the network (no inference server).
        raise ConfigError(
            "env_groups", groups, "1 with --algo a3c (its workers act with their own network)"
        )
    check.choice("advantage_values", ADVANTAGE_VALUES_CHOICES, allow_none=True)
    check.choice("reward_clipping", REWARD_CLIPPING_CHOICES)
    check.positive("reward_scale", integer=False)
    for name in ("unroll_length", "queue_size"):
        check.positive(name)
    for name in ("learning_rate", "grad_norm_clip"):
        check.positive(name, integer=False, allow_none=True)
    check.positive("epsilon", integer=False)
    check.positive("lstm_lr_scale", integer=False, allow_none=True)
    check.in_range("lstm_lr_scale", 0.0, 1e3, allow_none=True)
    for name in ("discounting", "gae_lambda"):
        check.in_range(name, 0.0, 1.0)
    for name in ("baseline_cost", "entropy_cost"):
        check.in_range(name, 0.0, 1e6)
