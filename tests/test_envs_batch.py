"""`gazelle.envs.batch.SerialEnvs` on real envs (CartPole, Breakout, a MiniGrid instruction
task): the batch must give, env by env, what each env gives when stepped alone and reset by
hand, with game totals across life loss and env errors reset and reported."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from gazelle.envs import make
from gazelle.envs.batch import BatchStep, SerialEnvs

#: Breakout without randomness of its own (no sticky actions, no no-op starts), FIRE on
#: every reset, and a lost life ending the episode but not the game.
BREAKOUT = partial(
    make, "ALE/Breakout-v5", sticky_actions=False, life_loss=True, fire_reset=True, noop_max=0
)


def _replay(
    env_fns: Sequence[Callable[[], gym.Env]], seeds: list[int], actions: np.ndarray
) -> list[BatchStep]:
    """Step a batch through `actions` `[T, N]` and check every step against the same envs
    stepped alone (reset by hand at every end, totals kept until the game is over).
    Returns the batch's steps, without their (reused) frame buffer."""
    refs = [fn() for fn in env_fns]
    ref_obs = [ref.reset(seed=seed)[0] for ref, seed in zip(refs, seeds)]
    totals, lengths = [0.0] * len(refs), [0] * len(refs)
    out: list[BatchStep] = []
    with SerialEnvs(env_fns, seeds=seeds) as envs:
        obs = envs.reset()
        assert not obs["frame"].flags.writeable
        _assert_obs(obs, ref_obs)
        for step_actions in actions:
            step = envs.step(step_actions)
            assert step.errors == []
            for i, ref in enumerate(refs):
                last, reward, terminated, truncated, info = ref.step(int(step_actions[i]))
                ended = terminated or truncated
                game_over = ended and info.get("game_over", True)
                totals[i] += float(reward)
                lengths[i] += 1
                assert step.reward[i] == np.float32(reward)
                assert (step.terminated[i], step.truncated[i]) == (terminated, truncated)
                assert step.game_over[i] == game_over
                assert step.episode_return[i] == np.float32(totals[i])
                assert step.episode_length[i] == lengths[i]
                if ended:
                    np.testing.assert_array_equal(step.final_obs[i]["frame"], last["frame"])
                    assert step.final_obs[i].get("instruction") == last.get("instruction")
                    ref_obs[i] = ref.reset()[0]
                    if game_over:
                        totals[i], lengths[i] = 0.0, 0
                else:
                    assert i not in step.final_obs
                    ref_obs[i] = last
            _assert_obs(step.obs, ref_obs)
            out.append(step._replace(obs={}))
    return out


def _assert_obs(obs: dict[str, Any], ref_obs: list[dict[str, Any]]) -> None:
    for i, ref in enumerate(ref_obs):
        np.testing.assert_array_equal(obs["frame"][i], ref["frame"])
    if "instruction" in ref_obs[0]:
        assert obs["instruction"] == [ref["instruction"] for ref in ref_obs]
    else:
        assert "instruction" not in obs


def test_cartpole_auto_reset_with_final_obs_on_truncation_and_termination() -> None:
    # env 0 alternates its pushes and is cut at 8 steps; env 1 always pushes left and falls.
    fns = [partial(make, "CartPole-v1", max_episode_steps=8), partial(make, "CartPole-v1")]
    actions = np.stack([np.arange(30) % 2, np.zeros(30, np.int64)], axis=1)
    steps = _replay(fns, [3, 4], actions)
    truncated = np.array([s.truncated for s in steps])
    terminated = np.array([s.terminated for s in steps])
    np.testing.assert_array_equal(np.flatnonzero(truncated[:, 0]), [7, 15, 23])
    assert not terminated[:, 0].any() and terminated[:, 1].sum() >= 2
    # CartPole pays 1 a step: the totals are the episode lengths, restarted after each end.
    assert steps[7].episode_length[0] == 8 and steps[8].episode_length[0] == 1
    assert all(s.episode_return[1] == s.episode_length[1] for s in steps)


def test_breakout_totals_run_across_life_loss_and_restart_after_game_over() -> None:
    actions = np.random.default_rng(1).integers(0, 4, size=(300, 1))
    steps = _replay([BREAKOUT], [0], actions)
    over = [t for t, s in enumerate(steps) if s.game_over[0]]
    assert len(over) == 1 and over[0] < len(steps) - 1
    ends = [t for t, s in enumerate(steps[: over[0] + 1]) if s.terminated[0]]
    assert len(ends) == 5 and ends[-1] == over[0]  # 5 lives: each loss ends an episode
    game = slice(0, over[0] + 1)
    rewards = np.array([s.reward[0] for s in steps[game]])
    life_loss = ends[-2]  # the last life lost before the game over
    # the totals at a life loss are the game's so far, not the episode's
    assert steps[life_loss].episode_length[0] == life_loss + 1
    assert steps[life_loss].episode_return[0] == rewards[: life_loss + 1].sum() > 0
    assert steps[over[0]].episode_return[0] == rewards.sum()
    assert steps[over[0]].episode_length[0] == over[0] + 1
    assert steps[over[0] + 1].episode_length[0] == 1


def test_instructions_and_final_instructions() -> None:
    fns = [partial(make, "MiniGrid-GoToObject-6x6-N2-v0")] * 2
    actions = np.random.default_rng(0).integers(0, 7, size=(40, 2))
    steps = _replay(fns, [5, 6], actions)
    finals = [s.final_obs[i]["instruction"] for s in steps for i in s.final_obs]
    assert len(finals) >= 2 and all(text.startswith("go to the ") for text in finals)


def test_env_error_is_reported_and_that_env_reset_while_the_others_go_on() -> None:
    ref = make("CartPole-v1")
    ref.reset(seed=2)
    ref.step(1)
    ref.step(0)
    fresh = ref.reset()[0]["frame"]  # what env 1 must show once reset after its error
    with SerialEnvs([partial(make, "CartPole-v1")] * 2, seeds=[1, 2]) as envs:
        envs.reset()
        envs.step(np.array([0, 1]))
        before = envs.step(np.array([1, 0])).obs["frame"].copy()
        failed = envs.step(np.array([0, 7]))  # 7 is no CartPole action: its step raises
        assert [i for i, _ in failed.errors] == [1]
        assert failed.errors[0][1].startswith("step: AssertionError")
        assert failed.truncated[1] and not failed.terminated[1] and not failed.game_over[1]
        assert failed.reward[1] == 0.0
        assert failed.episode_length[1] == 2 and failed.episode_return[1] == 2.0
        np.testing.assert_array_equal(failed.final_obs[1]["frame"], before[1])
        np.testing.assert_array_equal(failed.obs["frame"][1], fresh)
        assert list(failed.final_obs) == [1] and failed.episode_length[0] == 3
        after = envs.step(np.array([1, 1]))
        assert after.errors == [] and after.episode_length.tolist() == [4, 1]


def test_step_checks_reset_shape_and_close() -> None:
    envs = SerialEnvs([partial(make, "CartPole-v1")] * 2)
    assert envs.num_envs == 2 and envs.obs_spec.frame_shape == (4,)
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros(2, np.int64))
    envs.reset()
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros(3, np.int64))
    envs.close()
    envs.close()
    with pytest.raises(RuntimeError, match="closed"):
        envs.step(np.zeros(2, np.int64))


def test_rejects_mixed_spaces_and_wrong_seed_count() -> None:
    with pytest.raises(ValueError, match="differ"):
        SerialEnvs([partial(make, "CartPole-v1"), partial(make, "Acrobot-v1")])
    with pytest.raises(ValueError, match="seeds"):
        SerialEnvs([partial(make, "CartPole-v1")] * 2, seeds=[1])
    with pytest.raises(ValueError, match="empty"):
        SerialEnvs([])
