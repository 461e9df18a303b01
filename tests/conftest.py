"""Shared fixtures: the small configs the integration tests train with."""

from __future__ import annotations

import os
from typing import Any

# why: a Ray instance started by the tests binds every port to loopback only when this is
# set before Ray's first import (gazelle.backends.ray.cluster.LOOPBACK_ENV).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest

from gazelle.config import Config

#: A CartPole run that takes seconds: 2 actors x 2 envs, B=4, T=10 (40 agent steps/update).
SMALL: dict[str, Any] = dict(
    env="CartPole-v1",
    num_actors=2,
    envs_per_actor=2,
    batch_size=4,
    unroll_length=10,
    log_interval_s=0.5,
    checkpoint_interval_s=1000.0,
)


@pytest.fixture
def small_config(tmp_path):
    """`small_config(**overrides)`: `SMALL` with a fresh logdir under `tmp_path`."""

    def make(**overrides: Any) -> Config:
        from gazelle.config import algorithm_fields, common_fields

        algo = overrides.get("algo", "impala")
        # why: SMALL's IMPALA settings (batch size) are not settings of another algorithm
        known = {*common_fields(), *algorithm_fields(algo)}
        small = {k: v for k, v in SMALL.items() if k in known}
        return Config.of(**{**small, "logdir": str(tmp_path), **overrides})

    return make
