"""Environments: `make(spec)` for Atari, DMLab, BabyAI/MiniGrid, diagnostic tasks and any
Gymnasium id, all with the same observation dict and Discrete actions; human-normalised
scores for Atari-57 and DMLab-30. The env batch that actors step (`SerialEnvs`) is in
`gazelle.envs.batch`."""

from gazelle.envs.diagnostic import register as _register_diagnostic
from gazelle.envs.dmlab30 import LEVEL_MAPPING
from gazelle.envs.registry import default_action_repeats, expand_levels, make, obs_spec
from gazelle.envs.scores import (
    ATARI57,
    DMLAB30,
    ScoreTable,
    atari_aggregate,
    compute_human_normalized_score,
    per_level_scores,
    table_for,
)

_register_diagnostic()

__all__ = [
    "ATARI57",
    "DMLAB30",
    "LEVEL_MAPPING",
    "ScoreTable",
    "atari_aggregate",
    "compute_human_normalized_score",
    "default_action_repeats",
    "expand_levels",
    "make",
    "obs_spec",
    "per_level_scores",
    "table_for",
]
