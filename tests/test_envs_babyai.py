"""BabyAI / MiniGrid (`gazelle.envs.babyai`) on the real minigrid package."""

from __future__ import annotations

import numpy as np

from gazelle.envs import default_action_repeats, make, obs_spec
from gazelle.envs.babyai import CHANNEL_SCALE, FRAME_SHAPE, grid_to_frame


def test_babyai_obs_contract() -> None:
    env = make("BabyAI-GoToRedBall-v0", seed=0)
    spec = obs_spec(env)
    assert spec.frame_shape == FRAME_SHAPE == (3, 56, 56) and spec.frame_dtype == np.uint8
    assert spec.has_instruction and spec.num_actions == 7
    assert default_action_repeats("BabyAI-GoToRedBall-v0") == 1
    obs, _ = env.reset()
    assert obs["instruction"] == "go to the red ball"
    assert obs["frame"].shape == (3, 56, 56) and obs["frame"].dtype == np.uint8
    assert env.observation_space.contains(obs)
    # why: the frame is the env's own symbolic view, drawn by grid_to_frame.
    np.testing.assert_array_equal(obs["frame"], grid_to_frame(env.unwrapped.gen_obs()["image"]))


def test_grid_to_frame_layout_and_scale() -> None:
    grid = np.zeros((7, 7, 3), np.uint8)
    grid[2, 5] = (6, 4, 0)  # a yellow ball at x=2, y=5
    grid[6, 0] = (4, 1, 2)  # a locked green door at x=6, y=0
    frame = grid_to_frame(grid)
    assert frame.shape == (3, 56, 56) and frame.flags.c_contiguous
    # why: rows are y and columns x; cell (x, y) covers rows 8y..8y+7 and columns 8x..8x+7.
    block = frame[:, 40:48, 16:24]
    np.testing.assert_array_equal(block, np.broadcast_to((6 * 25, 4 * 50, 0), (8, 8, 3)).T)
    np.testing.assert_array_equal(frame[:, 0:8, 48:56].reshape(3, -1)[:, 0], [100, 50, 240])
    assert frame[:, 8:40].max() == 0
    full = np.full((7, 7, 3), (10, 5, 2), np.uint8)
    np.testing.assert_array_equal(grid_to_frame(full)[:, 0, 0], (10, 5, 2) * CHANNEL_SCALE)


def test_minigrid_actions_rewards_and_termination() -> None:
    env = make("MiniGrid-Empty-5x5-v0", seed=0)
    obs, _ = env.reset()
    assert obs["instruction"] == "get to the green goal square"
    # The agent starts at (1, 1) facing east; the goal is at (3, 3).
    forward, right = 2, 1
    rewards, terminated = [], False
    for action in (forward, forward, right, forward, forward):
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
    assert terminated and not truncated and info["game_over"]
    assert rewards[:-1] == [0, 0, 0, 0]
    assert rewards[-1] == np.float32(1 - 0.9 * 5 / 100)


def test_minigrid_time_limit_truncates() -> None:
    env = make("MiniGrid-Empty-5x5-v0", seed=0)
    env.reset()
    for step in range(1, 101):
        _, _, terminated, truncated, info = env.step(0)  # turn left forever
        assert not terminated and truncated == (step == 100)
    assert info["game_over"]


def test_seeded_levels_reproduce() -> None:
    first = make("BabyAI-GoToLocal-v0", seed=3).reset()[0]
    second = make("BabyAI-GoToLocal-v0", seed=3).reset()[0]
    assert first["instruction"] == second["instruction"]
    np.testing.assert_array_equal(first["frame"], second["frame"])
