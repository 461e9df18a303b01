"""Numerical faults: a non-finite loss or gradient skips the update and leaves weights and
optimiser state untouched; K in a row stop the run with the last good checkpoint; NaN or
infinite rewards and observations from an env are reported and never trained on."""

import functools

import gymnasium
import numpy as np
import pytest
import torch

from gazelle import checkpoint
from gazelle.algorithms.a3c import train as train_a3c
from gazelle.algorithms.impala import train
from gazelle.algorithms.impala.loop import NonFiniteError
from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.envs.batch import SerialEnvs
from gazelle.models import Agent
from gazelle.runtime.learner import Learner
from test_learner import SPEC, make_batch


def _learner(agent, loss_fn):
    optimizer = torch.optim.Adam(agent.parameters(), lr=0.01)
    return Learner(agent, optimizer, loss_fn, torch.device("cpu"), grad_norm_clip=40.0)


@pytest.mark.parametrize("poison", ["loss", "grad"])
def test_a_nonfinite_update_is_skipped_and_changes_nothing(poison):
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="mlp", use_lstm=True, core_size=8)
    batch, _ = make_batch(agent)
    good = functools.partial(impala_loss, settings=LossSettings(0.99, 0.5, 0.01, "abs_one"))
    learner = _learner(agent, good)
    learner.step(batch, 0.01)  # one good step, so the optimiser has state to protect

    def bad(module, batch):
        loss, metrics = good(module, batch)
        if poison == "loss":
            return loss * float("nan"), metrics
        # a finite loss whose gradient is NaN: d sqrt(x)/dx at 0 is inf, times 0
        return loss + torch.sqrt(module.policy.bias[0] * 0.0), metrics

    learner.loss_fn = bad
    weights = {k: v.clone() for k, v in agent.state_dict().items()}
    optim_state = {
        k: {n: t.clone() for n, t in v.items()} for k, v in learner.optimizer.state.items()
    }
    metrics = learner.step(batch, 0.01)
    assert metrics["learner/skipped"] == 1.0 and learner.skipped_in_a_row == 1
    for key, value in agent.state_dict().items():
        assert torch.equal(value, weights[key]), key
    for param, state in learner.optimizer.state.items():
        for name, tensor in state.items():
            assert torch.equal(tensor, optim_state[param][name]), name
    learner.loss_fn = good
    assert learner.step(batch, 0.01)["learner/skipped"] == 0.0
    assert learner.skipped_in_a_row == 0 and learner.skipped == 1


@pytest.mark.slow
def test_nonfinite_updates_in_a_row_stop_the_run_with_the_last_good_checkpoint(
    small_config, tmp_path
):
    good = functools.partial(impala_loss, settings=LossSettings(0.99, 0.5, 0.01, "abs_one"))
    calls = []

    def goes_bad(agent, batch):
        calls.append(1)
        loss, metrics = good(agent, batch)
        return (loss if len(calls) <= 5 else loss * float("nan")), metrics

    with pytest.raises(NonFiniteError, match="3 updates in a row"):
        train(small_config(total_frames=10**6, max_nonfinite_updates=3), loss_fn=goes_bad)
    state = checkpoint.load(tmp_path / "checkpoint.pt")
    assert state["updates"] == 5 and len(calls) == 8
    assert all(bool(torch.isfinite(v).all()) for v in state["agent"].values())


class NaNAt(gymnasium.Env):
    """CartPole-shaped env that returns a NaN (reward or observation) at one step."""

    def __init__(self, where="reward", at=3):
        self.where, self.at, self.t = where, at, 0
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs, reward = np.full(2, 0.5, np.float32), 1.0
        if self.t == self.at:
            if self.where == "reward":
                reward = float("nan")
            else:
                obs[1] = np.inf
        return obs, reward, False, self.t >= 10, {}


@pytest.mark.parametrize("where", ["reward", "observation"])
def test_a_nan_from_the_env_is_reported_and_never_reaches_the_batch(where):
    envs = SerialEnvs([lambda: NaNAt(where)], seeds=[0])
    envs.reset()
    steps = [envs.step(np.zeros(1, np.int64)) for _ in range(4)]
    bad = steps[2]  # the env's third step is the NaN one
    assert bad.errors and bad.errors[0][0] == 0 and f"non-finite {where}" in bad.errors[0][1]
    assert "step 3 of the episode" in bad.errors[0][1]
    assert bad.truncated[0] and not bad.game_over[0] and bad.reward[0] == 0.0
    for step in steps:
        assert np.isfinite(step.reward).all() and np.isfinite(step.obs["frame"]).all()
    assert not steps[3].errors and steps[3].reward[0] == 1.0  # reset, and going on


@pytest.mark.slow
def test_a3c_stops_after_nonfinite_pushes_in_a_row_with_the_last_good_checkpoint(
    small_config, tmp_path, capsys
):
    """A3C used to skip non-finite pushes forever (they add no frames: the run never
    ended). One worker, so that its updates arrive in order: 3 good, then NaN ones."""
    config = small_config(
        algo="a3c", model="runtime_children:NaNAfterThree", num_actors=1, total_frames=10**6,
        max_nonfinite_updates=4, log_interval_s=0.3,
    )  # fmt: skip
    with pytest.raises(NonFiniteError, match="4 updates in a row") as err:
        train_a3c(config)
    assert "\n" not in str(err.value)
    out = capsys.readouterr().out
    assert out.count("non-finite loss or gradient at") == 4
    state = checkpoint.load(tmp_path / "checkpoint.pt")
    assert state["updates"] == 3 and state["frames"] > 0
    assert all(bool(torch.isfinite(v).all()) for v in state["agent"].values())
