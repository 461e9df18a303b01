"""Typed, frozen configuration, validated once at the edge.

A `Config` has one section per concern (`env`, `model`, `actors`, `run`) and one per
algorithm (`impala`); each field is one flag of `gazelle train`. `resolve` fills the fields a
user left unset from the env family's preset; `validate` raises `ConfigError` naming the
flag, the bad value and what is allowed. See `gazelle.config.sections` for every field.
"""

from gazelle.config.core import Config, FlatField, algorithm_fields, all_fields, common_fields
from gazelle.config.errors import ConfigError
from gazelle.config.presets import (
    A3C_PRESET_NAMES,
    A3C_PRESETS,
    IMPALA_PRESETS,
    PRESET_NAMES,
    default_num_actors,
    default_slots_per_env,
    default_torso,
    env_family,
    resolve,
)
from gazelle.config.sections import (
    ALGORITHM_SECTIONS,
    COMMON_SECTIONS,
    ActorConfig,
    EnvConfig,
    ImpalaConfig,
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
    "A3C_PRESETS",
    "A3C_PRESET_NAMES",
    "ALGORITHM_SECTIONS",
    "COMMON_SECTIONS",
    "IMPALA_PRESETS",
    "INFERENCE_CHOICES",
    "OPTIMIZER_CHOICES",
    "PRECISION_CHOICES",
    "PRESET_NAMES",
    "REWARD_CLIPPING_CHOICES",
    "TORSO_CHOICES",
    "ActorConfig",
    "Config",
    "ConfigError",
    "EnvConfig",
    "FlatField",
    "ImpalaConfig",
    "ModelConfig",
    "RunConfig",
    "algorithm_fields",
    "all_fields",
    "common_fields",
    "default_num_actors",
    "default_slots_per_env",
    "default_torso",
    "env_family",
    "resolve",
    "validate",
]
