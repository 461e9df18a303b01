"""Typed, frozen configuration, validated once at the edge.

A `Config` has one section per concern (`env`, `model`, `actors`, `run`) and one per
algorithm (`impala`, declared in the algorithm's folder and found through
`gazelle.config.registry`); each field is one flag of `gazelle train`. `resolve` fills the
fields a user left unset from the env family's preset; `validate` raises `ConfigError`
naming the flag, the bad value and what is allowed. See `gazelle.config.sections` for the
common fields and each algorithm's `settings` module for its own.
"""

from gazelle.config.core import Config, FlatField, algorithm_fields, all_fields, common_fields
from gazelle.config.errors import ConfigError
from gazelle.config.presets import (
    default_num_actors,
    default_slots_per_env,
    default_torso,
    env_family,
    fresh_logdir,
    resolve,
)
from gazelle.config.registry import Algorithm, Backend
from gazelle.config.sections import (
    COMMON_SECTIONS,
    ActorConfig,
    EnvConfig,
    ModelConfig,
    RunConfig,
)
from gazelle.config.validation import (
    INFERENCE_CHOICES,
    OPTIMIZER_CHOICES,
    PRECISION_CHOICES,
    REWARD_CLIPPING_CHOICES,
    TORSO_CHOICES,
    validate,
)

__all__ = [
    "COMMON_SECTIONS",
    "INFERENCE_CHOICES",
    "OPTIMIZER_CHOICES",
    "PRECISION_CHOICES",
    "REWARD_CLIPPING_CHOICES",
    "TORSO_CHOICES",
    "ActorConfig",
    "Algorithm",
    "Backend",
    "Config",
    "ConfigError",
    "EnvConfig",
    "FlatField",
    "ModelConfig",
    "RunConfig",
    "algorithm_fields",
    "all_fields",
    "common_fields",
    "default_num_actors",
    "default_slots_per_env",
    "default_torso",
    "env_family",
    "fresh_logdir",
    "resolve",
    "validate",
]
