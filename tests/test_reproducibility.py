"""With one actor, a seed repeats a CPU run exactly: the same episodes, the same weights.

Between two runs of one seed only timing differs, and with a free-running actor timing
decided which weights each unroll acted with (the actor pulls whatever the learner published
last). With one actor and `--lockstep` the actor acts in lockstep with the learner
(`LocalPolicy`), which these tests check directly and end to end.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import gazelle
from gazelle.algorithms.common import prepare
from gazelle.algorithms.impala.build import actor_specs
from gazelle.models import Agent
from gazelle.runtime.policy import LocalPolicy, PolicyStopped
from gazelle.types import ObsSpec


class FakeParams:
    """A `ParamSource` whose version the test (standing in for the learner) moves."""

    def __init__(self) -> None:
        self.version = 0
        self.pulled: list[int] = []

    def current_version(self) -> int:
        return self.version

    def pull(self, module: torch.nn.Module, have_version: int) -> int:
        self.pulled.append(self.version)
        return self.version


def policy(params: FakeParams, lockstep_batch: int | None, waiting=lambda: False, timeout=5.0):
    agent = Agent(ObsSpec((4,), np.dtype(np.float32), 2), torso="mlp")
    return LocalPolicy(agent, params, 2, lockstep_batch, waiting, timeout)


def test_lockstep_waits_for_the_updates_the_unrolls_so_far_allow():
    params = FakeParams()
    waited = []

    def learner_catches_up() -> bool:
        # why: called while the actor waits; the "learner" publishes one update per call.
        waited.append(params.version)
        params.version += 1
        return False

    local = policy(params, lockstep_batch=4, waiting=learner_catches_up)
    for _ in range(6):  # 2 envs per unroll, batches of 4: one update per 2 unrolls
        local.begin_unroll()
    # Unroll k acts with version k * 2 // 4, whatever the timing: 0 0 1 1 2 2.
    assert params.pulled == [0, 0, 1, 1, 2, 2] and waited == [0, 1]
    assert local.version == 2


def test_free_running_pulls_whatever_is_there():
    params = FakeParams()
    local = policy(params, lockstep_batch=None, waiting=lambda: pytest.fail("waited"))
    for version in (0, 0, 5):
        params.version = version
        local.begin_unroll()
    assert params.pulled == [0, 0, 5]


def test_lockstep_stops_when_asked():
    params = FakeParams()
    local = policy(params, lockstep_batch=2, waiting=lambda: True)
    local.begin_unroll()
    with pytest.raises(PolicyStopped):
        local.begin_unroll()


def test_lockstep_counts_afresh_after_a_version_that_never_comes():
    # A skipped (non-finite) update publishes nothing: version 1 never comes.
    params = FakeParams()
    local = policy(params, lockstep_batch=2, timeout=0.05)
    local.begin_unroll()
    local.begin_unroll()  # waits 0.05 s for version 1, then acts with version 0
    params.version = 3
    local.begin_unroll()  # counted from version 0 again: target 0 + 1, no wait
    start = time.monotonic()
    local.begin_unroll()  # target 0 + 2: met
    assert params.pulled == [0, 0, 3, 3] and time.monotonic() - start < 0.04


@pytest.mark.parametrize(
    ("overrides", "lockstep"),
    [
        ({"num_actors": 1, "lockstep": True}, 4),
        ({"num_actors": 1}, None),  # off by default: it costs the actor/learner overlap
        ({"num_actors": 2, "lockstep": True}, None),
        ({"num_actors": 1, "lockstep": True, "inference": "central"}, None),
        ({"num_actors": 1, "lockstep": True, "max_policy_lag": 2}, None),
        # an unset count is the one actor lockstep needs, not the measured layout's
        ({"num_actors": None, "lockstep": True}, 4),
        ({"num_actors": None, "lockstep": True, "inference": "central"}, None),
    ],
)
def test_only_one_actor_with_local_inference_runs_in_lockstep_when_asked(
    small_config, overrides, lockstep
):
    config, found, _ = prepare(small_config(**overrides))
    specs = actor_specs(config, found)
    assert {spec.lockstep_batch for spec in specs} == {lockstep}
    if lockstep is not None:
        assert len(specs) == 1


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"num_actors": 2}, "--num-actors 2 (it acts with one)"),
        ({"num_actors": 1, "inference": "central"}, "--inference central"),
        ({"num_actors": 1, "max_policy_lag": 2}, "--max-policy-lag"),
        ({"num_actors": 1, "algo": "a3c"}, "--algo a3c has no learner batches"),
        ({"num_actors": None}, None),  # the one actor it needs: it acts, nothing to say
        ({"num_actors": 1}, None),
    ],
)
def test_a_lockstep_that_cannot_act_says_why_once(small_config, capsys, overrides, says):
    """Asked for (or set by a preset) where it cannot act, --lockstep used to be dropped
    without a word; the run says why, once."""
    prepare(small_config(lockstep=True, **overrides))
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "--lockstep does not act" in line]
    if says is None:
        assert lines == [], out
    else:
        assert len(lines) == 1 and says in lines[0] and lines[0].startswith("gazelle: warning:")


def test_lockstep_does_not_act_with_the_actors_on_another_backend(small_config):
    from gazelle.algorithms.layout import lockstep_blocked

    config, _, _ = prepare(small_config(num_actors=1, lockstep=True))
    assert lockstep_blocked(config, 1) is None
    assert "--backend ray" in str(lockstep_blocked(config.replace(backend="ray"), 1))
    assert "2 levels" in str(lockstep_blocked(config, 2))


def episode_returns(logdir) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return [e.value for e in events.Scalars("charts/episode_return")]


def one_actor_run(tmp_path, name: str, seed: int) -> tuple[list[float], dict]:
    logdir = tmp_path / name
    config = gazelle.Config.of(
        env="CartPole-v1", num_actors=1, envs_per_actor=2, batch_size=4, unroll_length=10,
        total_frames=3000, seed=seed, device="cpu", logdir=str(logdir), log_interval_s=0.5,
        lockstep=True,
        checkpoint_interval_s=1000.0,
    )  # fmt: skip
    result = gazelle.train(config)
    assert result.frames >= 3000 and result.actor_restarts == 0
    state = torch.load(logdir / "checkpoint.pt", weights_only=True)
    return episode_returns(logdir), state["agent"]


@pytest.mark.slow
def test_one_actor_cpu_runs_repeat_exactly_with_a_seed(tmp_path):
    first, first_weights = one_actor_run(tmp_path, "a", seed=7)
    again, again_weights = one_actor_run(tmp_path, "b", seed=7)
    other, other_weights = one_actor_run(tmp_path, "c", seed=8)
    # why: the run stops at a frame count; the episodes of an unroll the actor finished
    # while the learner stopped may or may not be logged, so compare what both logged.
    common = min(len(first), len(again))
    assert common >= 50 and abs(len(first) - len(again)) <= 4
    assert first[:common] == again[:common]
    assert all(torch.equal(first_weights[k], again_weights[k]) for k in first_weights)
    # Another seed: other episodes, other weights.
    common = min(len(first), len(other))
    assert first[:common] != other[:common]
    assert not all(torch.equal(first_weights[k], other_weights[k]) for k in first_weights)
