"""Typed, frozen configuration, validated once at the edge.

Every hyperparameter of a run lives here, with a docstring per field. Fields left `None` are
filled by `resolve()` from the environment family's preset (the IMPALA seed's defaults for
DMLab, the IMPALA paper's Atari settings, a tuned small setting for vector tasks), so that
`gazelle train` with no flags runs something that learns. `validate()` raises `ConfigError`
naming the flag, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, fields, replace
from typing import Any

TORSO_CHOICES = ("auto", "deep", "shallow", "nature", "universe", "mlp")
REWARD_CLIPPING_CHOICES = ("abs_one", "soft_asymmetric", "none")
PRECISION_CHOICES = ("fp32", "bf16")
INFERENCE_CHOICES = ("auto", "local", "central")
OPTIMIZER_CHOICES = ("rmsprop_tf", "rmsprop", "adam")


class ConfigError(ValueError):
    """A bad configuration value; `str(err)` is one line naming the flag."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        self.name, self.value, self.allowed = name, value, allowed
        flag = "--" + name.replace("_", "-")
        super().__init__(f"{flag}: invalid value {value!r}; allowed: {allowed}")


@dataclass(frozen=True)
class ImpalaConfig:
    """Everything a training run needs. Flags of `gazelle train` map 1:1 onto fields."""

    # --- environment ---
    env: str = "CartPole-v1"
    """Gymnasium id, a comma-separated list (multi-task), or `dmlab30`."""
    num_action_repeats: int | None = None
    """Env frames per agent step (Atari frame skip); None: the env family's default."""
    sticky_actions: bool | None = None
    """Atari: repeat the previous action with probability 0.25 (revisited ALE protocol);
    unset: the id's protocol (ALE/*-v5 on, *NoFrameskip-v4 off)."""
    life_loss: bool | None = None
    """Atari: a lost life ends the training episode (not the logged game, never in test
    mode); unset: the id's protocol (*NoFrameskip-v4 on, ALE/*-v5 off)."""
    full_action_space: bool = False
    """Atari: all 18 actions instead of each game's minimal set (multi-game --env needs it
    when the games' action sets differ)."""
    # --- model ---
    model: str = "auto"
    """Torso: deep | shallow | nature | universe | mlp; auto = mlp for vectors, else deep."""
    use_lstm: bool = True
    """LSTM core (256) after the torso; off gives a feed-forward agent."""
    use_instruction: bool = True
    """Feed the env's instruction text to the language encoder (off: ablation)."""
    # --- actors ---
    num_actors: int | None = None
    """Actor processes; None: the machine's cores minus one for the learner (at least 2, and
    at least one per level of a multi-task --env)."""
    envs_per_actor: int | None = None
    """Envs each actor steps, with their inference batched."""
    inference: str = "auto"
    """local: each actor runs its own agent copy, batched over its envs (CPU); central: one
    server on the learner's device batches all actors' requests (the seed's dynamic
    batching); auto: central when the learner runs on CUDA, else local."""
    inference_max_wait_ms: float = 2.0
    """Central inference: how long the server keeps collecting requests after the first one
    of a batch (ms)."""
    inference_max_batch: int | None = None
    """Central inference: most envs per batch (at least --envs-per-actor); None: all actors'
    envs."""
    # --- learner ---
    batch_size: int | None = None
    """Unrolls per learner batch (seed: 2 on DMLab)."""
    unroll_length: int | None = None
    """Agent steps per unroll, T (seed: 100)."""
    total_frames: int | None = None
    """Env frames to train for (agent steps x action repeats)."""
    max_seconds: float | None = None
    """Also stop after this many seconds of training (fixed-time runs, benchmarks)."""
    learning_rate: float | None = None
    """Initial learning rate, decayed linearly to 0 over total_frames (seed: 0.00048)."""
    decay: float = 0.99
    """RMSProp decay (seed: 0.99)."""
    momentum: float = 0.0
    """RMSProp momentum (seed: 0)."""
    epsilon: float | None = None
    """RMSProp epsilon (seed: 0.1)."""
    optimizer: str = "rmsprop_tf"
    """rmsprop_tf: TensorFlow's RMSProp as in the seed (eps inside the sqrt); rmsprop: torch's."""
    entropy_cost: float | None = None
    """Weight of the entropy term (seed: 0.00025)."""
    baseline_cost: float = 0.5
    """Weight of the baseline loss (seed: 0.5)."""
    discounting: float = 0.99
    """Discount factor gamma (seed: 0.99)."""
    reward_clipping: str = "abs_one"
    """abs_one | soft_asymmetric | none (seed: abs_one)."""
    grad_norm_clip: float | None = 40.0
    """Clip the global gradient norm; None for no clipping (the seed does not clip)."""
    max_policy_lag: int | None = None
    """Drop unrolls whose policy is older than this many learner updates; None keeps all."""
    precision: str = "fp32"
    """Learner precision: fp32 or bf16 (autocast)."""
    learner_threads: int | None = None
    """Torch threads of the learner on CPU; None: the cores the actors leave (at least 1)."""
    # --- run ---
    logdir: str = "runs/default"
    """Where checkpoints, TensorBoard events and progress.jsonl go."""
    seed: int = 1
    """Seed of the learner; actor i seeds its envs from seed and i."""
    device: str = "auto"
    """Learner device: auto (cuda if present), cpu, cuda, cuda:N."""
    resume: bool = True
    """Continue from logdir's checkpoint when it exists (with the same config)."""
    checkpoint_interval_s: float = 600.0
    """Seconds between checkpoints (the seed: 600)."""
    log_interval_s: float = 5.0
    """Seconds between progress rows and TensorBoard scalars."""
    slots_per_env: int = 2
    """Unroll slots per env in shared memory: more buffering, more policy lag."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ImpalaConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


PRESETS: dict[str, dict[str, Any]] = {
    # Small vector tasks (CartPole, diagnostics): tuned to learn in a couple of CPU minutes.
    "vector": dict(
        envs_per_actor=8,
        batch_size=16,
        unroll_length=20,
        total_frames=1_000_000,
        learning_rate=0.004,
        epsilon=0.01,
        entropy_cost=0.003,
    ),
    # Atari: the IMPALA paper's Atari settings (Table G.1), with the seed's optimiser.
    "atari": dict(
        envs_per_actor=8,
        batch_size=32,
        unroll_length=20,
        total_frames=50_000_000,
        learning_rate=0.0006,
        epsilon=0.01,
        entropy_cost=0.01,
    ),
    # DMLab: the IMPALA seed's defaults.
    "dmlab": dict(
        envs_per_actor=1,
        batch_size=2,
        unroll_length=100,
        total_frames=1_000_000_000,
        learning_rate=0.00048,
        epsilon=0.1,
        entropy_cost=0.00025,
    ),
    # Other image tasks (BabyAI, MiniGrid, instruction diagnostics).
    "image": dict(
        envs_per_actor=8,
        batch_size=16,
        unroll_length=20,
        total_frames=5_000_000,
        learning_rate=0.0006,
        epsilon=0.01,
        entropy_cost=0.01,
    ),
}


def env_family(env: str, frame_is_image: bool, env_kind: str | None = None) -> str:
    """Preset name for an env spec: atari, dmlab, image or vector.

    `env_kind` is what `gazelle.envs.registry.resolve` found (atari, dmlab, minigrid, gym);
    without it, the spec's prefix decides.
    """
    first = env.split(",")[0].strip()
    if env_kind in ("atari", "dmlab"):
        return env_kind
    if first == "dmlab30" or first.startswith("dmlab:"):
        return "dmlab"
    if first.startswith("ALE/"):
        return "atari"
    return "image" if frame_is_image else "vector"


def default_num_actors(num_levels: int = 1, cores: int | None = None) -> int:
    """Actors for `--num-actors` left unset: every core but the learner's, at least 2 (so a
    2-core laptop still overlaps acting with learning) and one per level."""
    cores = cores or os.cpu_count() or 1
    return max(2, cores - 1, num_levels)


def resolve(
    config: ImpalaConfig,
    frame_is_image: bool,
    env_kind: str | None = None,
    env_defaults: dict[str, Any] | None = None,
) -> ImpalaConfig:
    """Fill the fields left None from the env family's preset and from `env_defaults` (what
    the env id itself implies, e.g. an Atari id's sticky actions and life loss); pick the
    torso for `auto`."""
    preset = {
        "sticky_actions": False,
        "life_loss": False,
        **PRESETS[env_family(config.env, frame_is_image, env_kind)],
        **(env_defaults or {}),
    }
    updates = {k: v for k, v in preset.items() if getattr(config, k) is None}
    if config.model == "auto":
        updates["model"] = "deep" if frame_is_image else "mlp"
    return replace(config, **updates)


def validate(config: ImpalaConfig) -> ImpalaConfig:
    """Check every field; raise `ConfigError` naming the first bad flag. Returns config."""

    def choice(name: str, allowed: tuple[str, ...]) -> None:
        if getattr(config, name) not in allowed:
            raise ConfigError(name, getattr(config, name), " | ".join(allowed))

    def positive(name: str, integer: bool = True, allow_none: bool = False) -> None:
        value = getattr(config, name)
        if value is None and allow_none:
            return
        kind = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
            raise ConfigError(name, value, "a positive " + ("integer" if integer else "number"))

    def in_range(name: str, low: float, high: float) -> None:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(name, value, f"a number in [{low}, {high}]")
        if not low <= value <= high:
            raise ConfigError(name, value, f"a number in [{low}, {high}]")

    if not isinstance(config.env, str) or not config.env.strip():
        raise ConfigError("env", config.env, "a Gymnasium id, a comma-separated list, or dmlab30")
    choice("model", TORSO_CHOICES)
    choice("reward_clipping", REWARD_CLIPPING_CHOICES)
    choice("precision", PRECISION_CHOICES)
    choice("inference", INFERENCE_CHOICES)
    choice("optimizer", OPTIMIZER_CHOICES)
    positive("slots_per_env")
    for name in (
        "num_actors",
        "num_action_repeats",
        "envs_per_actor",
        "batch_size",
        "unroll_length",
    ):
        positive(name, allow_none=True)
    positive("total_frames", allow_none=True)
    for name in ("learning_rate", "epsilon"):
        positive(name, integer=False, allow_none=True)
    positive("checkpoint_interval_s", integer=False)
    positive("max_seconds", integer=False, allow_none=True)
    positive("log_interval_s", integer=False)
    positive("grad_norm_clip", integer=False, allow_none=True)
    positive("max_policy_lag", allow_none=True)
    positive("learner_threads", allow_none=True)
    in_range("inference_max_wait_ms", 0.0, 10_000.0)
    positive("inference_max_batch", allow_none=True)
    max_batch, envs = config.inference_max_batch, config.envs_per_actor
    if max_batch is not None and envs is not None and max_batch < envs:
        raise ConfigError(
            "inference_max_batch",
            max_batch,
            f"at least --envs-per-actor ({envs}, one actor's request), or unset for all envs",
        )
    in_range("decay", 0.0, 1.0)
    in_range("momentum", 0.0, 1.0)
    in_range("discounting", 0.0, 1.0)
    in_range("baseline_cost", 0.0, 1e6)
    if config.entropy_cost is not None:
        in_range("entropy_cost", 0.0, 1e6)
    dev = config.device
    if not (dev in ("auto", "cpu", "cuda") or dev.startswith("cuda:") or dev == "mps"):
        raise ConfigError("device", dev, "auto | cpu | cuda | cuda:N | mps")
    return config
