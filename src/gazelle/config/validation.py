"""`validate(config)`: every field checked once, at the edge; the first bad one raises
`ConfigError` naming its flag, the value and what is allowed."""

from __future__ import annotations

from typing import Any

from gazelle import registrations
from gazelle.config import finite, registry
from gazelle.config.core import Config
from gazelle.config.errors import ConfigError

TORSO_CHOICES = ("auto", "deep", "shallow", "nature", "universe", "mlp")
REWARD_CLIPPING_CHOICES = ("abs_one", "soft_asymmetric", "none")
PRECISION_CHOICES = ("fp32", "bf16")
INFERENCE_CHOICES = ("auto", "local", "central")
OPTIMIZER_CHOICES = ("rmsprop_tf", "rmsprop", "adam")
INIT_CHOICES = ("seed", "universe", "torch")
ACTIVATION_CHOICES = ("relu", "elu")
#: The torsos that take `--activation`, and theirs when it is unset
#: (`gazelle.models.torsos.WITH_ACTIVATION`).
TORSO_ACTIVATIONS = {"deep": "relu", "shallow": "relu", "nature": "relu", "universe": "elu"}
LOG_STD_CHOICES = ("parameter", "state")
ACTION_BOUNDS_CHOICES = ("clip", "tanh")
#: The largest --seed: numpy's seeds end at 2**32 - 1, and actor i's is --seed + i.
SEED_MAX = 2**31 - 1
#: `gazelle.envs.observations.IMAGE_LAYOUTS`.
IMAGE_LAYOUT_CHOICES = ("auto", "hwc", "chw")


class _Checks:
    """The checks, reading values by flat name from one config (an algorithm's `validate`
    is handed one: `Checks`)."""

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
    finite.check(config)  # why: first, so that NaN never reaches a `<=` that lets it by
    check = _Checks(config)
    check.in_range("seed", 0, SEED_MAX)
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
    check.choice("backend", registry.backend_names())
    check.positive("slots_per_env", allow_none=True)
    check.positive("ray_actor_cpus", integer=False)
    _validate_backend_flags(config)
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
    check.positive("learners")
    check.positive("learner_timeout_s", integer=False)
    if config.run.learners > 1 and registry.backend(config.actors.backend).build_learners is None:
        with_learners = [b.name for b in registry.backends() if b.build_learners is not None]
        raise ConfigError(
            "learners",
            config.run.learners,
            f"1 with --backend {config.actors.backend} (several learners: --backend "
            f"{' | '.join(with_learners)})",
        )
    check.in_range("inference_max_wait_ms", 0.0, 10_000.0)
    check.positive("env_groups", allow_none=True)
    groups = config.actors.env_groups
    if groups is not None and groups > 1 and config.actors.inference == "local":
        raise ConfigError(
            "env_groups",
            groups,
            "1 with --inference local (an actor's own agent copy has no round trip to hide); "
            "more with --inference central",
        )
    envs = config.actors.envs_per_actor
    if groups is not None and envs is not None and groups > envs:
        raise ConfigError(
            "env_groups", groups, f"at most --envs-per-actor ({envs}): a group is one env or more"
        )
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
    check.choice("image_layout", IMAGE_LAYOUT_CHOICES)
    flicker = config.env.obs_flicker
    if isinstance(flicker, bool) or not isinstance(flicker, (int, float)) or not 0 <= flicker < 1:
        raise ConfigError("obs_flicker", flicker, "a probability in [0, 1) (0: off)")
    check.choice("doom_actions", ("single", "combos", "registered"), allow_none=True)
    if config.env.raw_obs and config.env.atari_frames is not None:
        raise ConfigError(
            "raw_obs", True, "off with --atari-frames (that is Atari's preprocessing; raw is none)"
        )
    algorithm = registry.algorithm(config.algo)
    if algorithm.presets:
        check.choice("preset", tuple(algorithm.presets))
    if algorithm.validate is not None:
        algorithm.validate(check)
    return config


def _validate_backend_flags(config: Config) -> None:
    """A flag that only another backend reads (`Backend.own_flags`), set on this one, is
    refused: it would silently do nothing."""
    actors, defaults = config.actors, type(config.actors)()
    for other in registry.backends():
        if other.name == actors.backend:
            continue
        for flag in other.own_flags:
            value = getattr(actors, flag)
            if value != getattr(defaults, flag):
                raise ConfigError(
                    flag, value, f"only with --backend {other.name} (now: {actors.backend})"
                )


def _validate_torso(torso: Any) -> None:
    """A built-in torso, one registered with `gazelle.register_torso`, or a `module:attr`
    factory path (whether it builds and fits the frames is checked once the env is known:
    `gazelle.algorithms.preflight.check_torso`)."""
    if torso in TORSO_CHOICES or (isinstance(torso, str) and registrations.torso_ref(torso)):
        return
    allowed = (*TORSO_CHOICES, *registrations.torso_names(), "a registered torso or 'module:attr'")
    raise ConfigError("model", torso, " | ".join(allowed))


#: The checks an algorithm's `validate(check)` is handed (`gazelle.config.registry`).
Checks = _Checks
