"""`validate(config)`: every field checked once, at the edge; the first bad one raises
`ConfigError` naming its flag, the value and what is allowed."""

from __future__ import annotations

from typing import Any

from gazelle import registrations
from gazelle.config.core import Config
from gazelle.config.errors import ConfigError

TORSO_CHOICES = ("auto", "deep", "shallow", "nature", "universe", "mlp")
REWARD_CLIPPING_CHOICES = ("abs_one", "soft_asymmetric", "none")
PRECISION_CHOICES = ("fp32", "bf16")
INFERENCE_CHOICES = ("auto", "local", "central")
OPTIMIZER_CHOICES = ("rmsprop_tf", "rmsprop", "adam")
BACKEND_CHOICES = ("local", "ray")
INIT_CHOICES = ("seed", "universe", "torch")
ACTIVATION_CHOICES = ("relu", "elu")
#: The torsos that take `--activation`, and theirs when it is unset
#: (`gazelle.models.torsos.WITH_ACTIVATION`).
TORSO_ACTIVATIONS = {"deep": "relu", "shallow": "relu", "nature": "relu", "universe": "elu"}
ADVANTAGE_VALUES_CHOICES = ("acting", "synced")
LOG_STD_CHOICES = ("parameter", "state")
ACTION_BOUNDS_CHOICES = ("clip", "tanh")


class _Checks:
    """The checks, reading values by flat name from one config."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def value(self, name: str) -> Any:
        return self.config.get(name)

    def choice(self, name: str, allowed: tuple[str, ...], allow_none: bool = False) -> None:
        value = self.value(name)
        if not (value is None and allow_none) and value not in allowed:
            raise ConfigError(name, value, " | ".join(allowed))

    def positive(self, name: str, integer: bool = True, allow_none: bool = False) -> None:
        value = self.value(name)
        if value is None and allow_none:
            return
        kind = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
            raise ConfigError(name, value, "a positive " + ("integer" if integer else "number"))

    def in_range(self, name: str, low: float, high: float, allow_none: bool = False) -> None:
        value = self.value(name)
        if value is None and allow_none:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(name, value, f"a number in [{low}, {high}]")
        if not low <= value <= high:
            raise ConfigError(name, value, f"a number in [{low}, {high}]")


def validate(config: Config) -> Config:
    """Check every field of the common sections and of the algorithm that runs; returns
    `config` unchanged."""
    check = _Checks(config)
    env = config.env.id
    if not isinstance(env, str) or not env.strip():
        raise ConfigError("env", env, "a Gymnasium id, a comma-separated list, or dmlab30")
    _validate_torso(config.model.torso)
    check.choice("init", INIT_CHOICES, allow_none=True)
    check.choice("activation", ACTIVATION_CHOICES, allow_none=True)
    check.choice("log_std", LOG_STD_CHOICES)
    check.choice("action_bounds", ACTION_BOUNDS_CHOICES)
    check.in_range("initial_log_std", -20.0, 2.0)
    if config.model.separate_value and config.model.use_lstm:
        raise ConfigError(
            "separate_value", True, "off with the LSTM core (--use-lstm), or --no-use-lstm"
        )
    torso = config.model.torso
    if config.model.activation is not None and torso not in ("auto", *TORSO_ACTIVATIONS):
        raise ConfigError(
            "activation",
            config.model.activation,
            f"unset with --model {torso} (only {' | '.join(TORSO_ACTIVATIONS)} take one)",
        )
    check.choice("precision", PRECISION_CHOICES)
    check.choice("inference", INFERENCE_CHOICES)
    check.choice("backend", BACKEND_CHOICES)
    check.positive("slots_per_env", allow_none=True)
    check.positive("ray_actor_cpus", integer=False)
    actors = config.actors
    if actors.backend != "ray" and (actors.ray_address is not None or actors.ray_dashboard):
        flag = "ray_address" if actors.ray_address is not None else "ray_dashboard"
        raise ConfigError(
            flag, getattr(actors, flag), "only with --backend ray (now: " + actors.backend + ")"
        )
    for name in ("num_actors", "num_action_repeats", "envs_per_actor", "learner_threads"):
        check.positive(name, allow_none=True)
    check.positive("total_frames", allow_none=True)
    check.positive("checkpoint_interval_s", integer=False)
    check.positive("max_seconds", integer=False, allow_none=True)
    check.in_range("target_return", -1e12, 1e12, allow_none=True)
    check.positive("log_interval_s", integer=False)
    check.positive("max_nonfinite_updates")
    check.positive("actor_timeout_s", integer=False)
    check.positive("batch_timeout_s", integer=False)
    check.in_range("inference_max_wait_ms", 0.0, 10_000.0)
    check.positive("inference_max_batch", allow_none=True)
    max_batch, envs = config.actors.inference_max_batch, config.actors.envs_per_actor
    if max_batch is not None and envs is not None and max_batch < envs:
        raise ConfigError(
            "inference_max_batch",
            max_batch,
            f"at least --envs-per-actor ({envs}, one actor's request), or unset for all envs",
        )
    dev = config.run.device
    if not isinstance(dev, str) or not (
        dev in ("auto", "cpu", "cuda", "mps") or dev.startswith("cuda:")
    ):
        raise ConfigError("device", dev, "auto | cpu | cuda | cuda:N | mps")
    check.choice("atari_frames", ("deepmind", "universe"), allow_none=True)
    if config.env.raw_obs and config.env.atari_frames is not None:
        raise ConfigError(
            "raw_obs", True, "off with --atari-frames (that is Atari's preprocessing; raw is none)"
        )
    if config.algo in ("impala", "appo"):
        _validate_impala(check)
    if config.algo == "appo":
        _validate_appo(config, check)
    elif config.algo == "a3c":
        _validate_a3c(check)
    return config


def _validate_torso(torso: Any) -> None:
    """A built-in torso, one registered with `gazelle.register_torso`, or a `module:attr`
    factory path (whether it builds and fits the frames is checked once the env is known:
    `gazelle.algorithms.preflight.check_torso`)."""
    if torso in TORSO_CHOICES or (isinstance(torso, str) and registrations.torso_ref(torso)):
        return
    allowed = (*TORSO_CHOICES, *registrations.torso_names(), "a registered torso or 'module:attr'")
    raise ConfigError("model", torso, " | ".join(allowed))


def _validate_a3c(check: _Checks) -> None:
    from gazelle.config.presets import A3C_PRESET_NAMES

    check.choice("preset", A3C_PRESET_NAMES)
    if check.value("normalize_obs"):
        # why: IMPALA's learner moves the statistics once per batch; A3C has no learner,
        # each worker computes its own gradient, and nothing would move them: the agent
        # would only clip its raw inputs at +-5 (docs/notes/continuous.md).
        raise ConfigError(
            "normalize_obs", True, "off with --algo a3c (not implemented there: use appo or impala)"
        )
    check.choice("advantage_values", ADVANTAGE_VALUES_CHOICES, allow_none=True)
    check.choice("reward_clipping", REWARD_CLIPPING_CHOICES)
    check.positive("reward_scale", integer=False)
    for name in ("unroll_length", "queue_size"):
        check.positive(name)
    for name in ("learning_rate", "grad_norm_clip"):
        check.positive(name, integer=False, allow_none=True)
    check.positive("epsilon", integer=False)
    for name in ("discounting", "gae_lambda"):
        check.in_range(name, 0.0, 1.0)
    for name in ("baseline_cost", "entropy_cost"):
        check.in_range(name, 0.0, 1e6)


def _validate_appo(config: Any, check: _Checks) -> None:
    for name in ("epochs", "minibatches"):
        check.positive(name, allow_none=True)
    check.in_range("clip_ratio", 1e-6, 10.0, allow_none=True)
    check.choice("clip_anchor", ("behaviour", "learner"), allow_none=True)
    batch, parts = config.appo.batch_size, config.appo.minibatches
    if batch is not None and parts is not None and batch % parts:
        raise ConfigError(
            "minibatches", parts, f"a divisor of --batch-size ({batch} unrolls per batch)"
        )


def _validate_impala(check: _Checks) -> None:
    from gazelle.config.presets import PRESET_NAMES

    check.choice("preset", PRESET_NAMES)
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
    check.positive("reward_scale", integer=False)
    check.positive("popart_rate", integer=False)
    check.in_range("popart_rate", 0.0, 1.0)
