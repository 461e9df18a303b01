"""Shared fixtures: the small configs the integration tests train with."""

from __future__ import annotations

import os
from typing import Any

# why: a Ray instance started by the tests binds every port to loopback only when this is
# set before Ray's first import (gazelle.backends.ray.cluster.LOOPBACK_ENV).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest

from gazelle import registrations
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


@pytest.fixture(autouse=True)
def _registrations_end_with_the_test():
    """Every torso and env a test registers is forgotten after it (and one it replaced is
    put back). Why: a run ships all of its process's registrations to its actors, so one a
    test module made (an env class defined in the test file) would reach a later test's Ray
    workers, which cannot import the test module, and fail that test."""
    torsos, envs = dict(registrations._TORSOS), dict(registrations._ENVS)
    yield
    for name in [*registrations._TORSOS, *registrations._ENVS]:
        if name not in torsos and name not in envs:
            registrations.remove(name)
    registrations._TORSOS.update(torsos)
    for entry in envs.values():
        if registrations._ENVS.get(entry.name) is not entry:
            registrations.add_env(entry)


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


@pytest.fixture(scope="session")
def ray_token():
    """Token authentication for the Ray clusters the tests start in this process (as
    docs/distributed.md tells a cluster's owner to run them): every process of theirs and
    this driver read `RAY_AUTH_MODE=token` and the token from the environment (no file is
    written). Gazelle refuses a cluster that answers without a token."""
    import secrets

    names = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
    saved = {name: os.environ.get(name) for name in names}
    token = secrets.token_hex(16)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    _reload_ray_config()
    yield token
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _reload_ray_config()


def _reload_ray_config() -> None:
    """Make an imported Ray read its authentication settings again (never under a live
    connection: the fixtures using this shut Ray down first)."""
    import sys

    if "ray._raylet" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
