"""Atari preprocessing (`gazelle.envs.atari`) on the real emulator (ale-py)."""

from __future__ import annotations

import numpy as np
import pytest

from gazelle.envs import default_action_repeats, make, obs_spec
from gazelle.envs.atari import AtariEnv
from gazelle.envs.resize import AreaResize, area_weights


def _pong(**kwargs: object) -> AtariEnv:
    # why: these tests replay the emulator step by step, which sticky actions would randomise.
    env = make("ALE/Pong-v5", seed=0, sticky_actions=False, **kwargs)
    assert isinstance(env, AtariEnv)
    return env


def test_deepmind_obs_and_actions() -> None:
    env = _pong()
    spec = obs_spec(env)
    assert spec.frame_shape == (4, 84, 84) and spec.frame_dtype == np.uint8
    assert spec.num_actions == 6 and not spec.has_instruction
    assert env.action_meanings == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
    assert default_action_repeats("ALE/Pong-v5") == 4
    obs, info = env.reset()
    assert obs["frame"].shape == (4, 84, 84) and obs["frame"].dtype == np.uint8
    assert env.observation_space.contains(obs) and not info["game_over"]
    assert env.ale.getFloat("repeat_action_probability") == 0.0


def test_v5_ids_keep_sticky_actions_and_the_whole_game() -> None:
    env = make("ALE/Breakout-v5", seed=0)
    assert isinstance(env, AtariEnv)
    assert env.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert not env._life_loss and env._fire_actions == ()


def test_no_frameskip_v4_ids_follow_the_classic_deepmind_protocol() -> None:
    env = make("BreakoutNoFrameskip-v4", seed=0)
    assert isinstance(env, AtariEnv)
    assert env.ale.getFloat("repeat_action_probability") == 0.0
    assert env._life_loss and env._noop_max == 30
    assert [a.name for a in env._fire_actions] == ["FIRE", "RIGHT"]
    # test mode plays the full game, even when life loss is asked for
    assert not make("BreakoutNoFrameskip-v4", seed=0, test_mode=True)._life_loss
    assert not make("BreakoutNoFrameskip-v4", seed=0, life_loss=True, test_mode=True)._life_loss
    # explicit flags override the protocol
    env = make("BreakoutNoFrameskip-v4", seed=0, sticky_actions=True, life_loss=False)
    assert env.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert not env._life_loss


def test_fire_reset_launches_the_ball_at_every_life() -> None:
    """Breakout waits for FIRE: with NOOPs only, no ball moves and no life is ever lost
    unless the reset pressed FIRE; with it, every life's reset launches a ball."""
    idle = make("ALE/Breakout-v5", seed=0, sticky_actions=False, life_loss=True, noop_max=0)
    idle.reset()
    infos = [idle.step(0)[4] for _ in range(300)]
    assert infos[-1]["lives"] == 5  # never launched, never lost
    env = make("BreakoutNoFrameskip-v4", seed=0, noop_max=0)
    env.reset()
    lives_lost = 0
    for _ in range(3000):
        _, _, terminated, truncated, info = env.step(0)  # NOOP only: the resets must fire
        if terminated or truncated:
            if info["game_over"]:
                break
            lives_lost += 1
            env.reset()
    assert lives_lost == 4 and info["game_over"] and info["lives"] == 0


def test_short_name_sticky_full_action_space_and_universe() -> None:
    env = make("Pong", sticky_actions=True, full_action_space=True)
    assert env.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert env.action_space.n == 18
    universe = make("ALE/Pong-v5", preset="universe")
    assert obs_spec(universe).frame_shape == (1, 42, 42)
    obs, _ = universe.reset(seed=0)
    assert obs["frame"].shape == (1, 42, 42)


def test_step_is_max_of_last_two_frames_and_sum_of_rewards() -> None:
    """Replay each step on a cloned emulator state and rebuild the expected frame."""
    env = _pong(noop_max=0)
    env.reset()
    ale, resize = env.ale, AreaResize((210, 160), (84, 84))
    pooled_differs = False
    for step in range(120):
        action = step % 6
        state = ale.cloneState()
        screens, reward = [], 0
        for _ in range(4):
            reward += ale.act(env._actions[action])
            screens.append(ale.getScreenGrayscale())
        ale.restoreState(state)
        obs, got_reward, *_ = env.step(action)
        expected = resize(np.maximum(screens[2], screens[3]))
        np.testing.assert_array_equal(obs["frame"][-1], expected)
        assert got_reward == reward
        pooled_differs |= not np.array_equal(expected, resize(screens[3]))
    assert pooled_differs, "max-pooling never mattered: the test would not catch its absence"


def test_frame_stack_order_oldest_first() -> None:
    env = _pong()
    obs, _ = env.reset()
    assert all(np.array_equal(obs["frame"][i], obs["frame"][3]) for i in range(3))
    previous = obs["frame"]
    for step in range(30):
        frame = env.step(step % 6)[0]["frame"]
        np.testing.assert_array_equal(frame[:3], previous[1:])
        previous = frame


def test_noop_starts_are_bounded_and_random() -> None:
    env = _pong(noop_max=30)
    counts = {env.reset()[1]["episode_frame_number"] for _ in range(12)}
    assert counts <= set(range(1, 31)) and len(counts) > 3
    no_noops = _pong(noop_max=0)
    assert no_noops.reset()[1]["episode_frame_number"] == 0


def test_truncation_at_frame_limit() -> None:
    env = _pong(noop_max=0, max_frames=100)
    env.reset()
    for step in range(1, 26):
        _, _, terminated, truncated, info = env.step(0)
        assert not terminated
        assert truncated == (step == 25) and info["game_over"] == truncated
    assert info["episode_frame_number"] == 100
    _, info = env.reset()
    assert info["episode_frame_number"] == 0


def test_game_return_accounts_every_reward() -> None:
    env = _pong(max_frames=2400)
    env.reset()
    total, steps, truncated, info = 0.0, 0, False, {}
    while not truncated:
        _, reward, _, truncated, info = env.step(1)
        total, steps = total + reward, steps + 1
    assert total < 0 and info["game_return"] == total  # serving and not moving loses points
    assert info["game_length"] == steps and info["episode_frame_number"] == 2400


def test_seed_reproducible() -> None:
    frames = []
    for _ in range(2):
        env = make("ALE/Breakout-v5", seed=5, sticky_actions=True)
        env.reset()
        frames.append([env.step(i % 4)[0]["frame"] for i in range(50)])
    np.testing.assert_array_equal(np.stack(frames[0]), np.stack(frames[1]))


def test_life_loss_ends_episode_not_game() -> None:
    env = make("ALE/Breakout-v5", seed=0, life_loss=True, noop_max=0)
    obs, _ = env.reset()
    start_lives = env.ale.lives()
    rng = np.random.default_rng(0)
    for _ in range(5000):
        obs, _, terminated, truncated, info = env.step(int(rng.integers(4)))
        if terminated or truncated:
            break
    assert terminated and not info["game_over"] and info["lives"] == start_lives - 1
    frames_before = info["episode_frame_number"]
    game_return = info["game_return"]
    continued, info = env.reset()
    # why: a life-loss reset continues the game: no emulator reset, same stacked frames.
    assert info["episode_frame_number"] == frames_before and info["lives"] == start_lives - 1
    np.testing.assert_array_equal(continued["frame"], obs["frame"])
    assert info["game_return"] == game_return


def test_without_life_loss_episode_is_the_game() -> None:
    env = make("ALE/Breakout-v5", seed=0, noop_max=0)
    env.reset()
    rng = np.random.default_rng(0)
    lives_seen = set()
    for _ in range(20000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(4)))
        lives_seen.add(info["lives"])
        if terminated or truncated:
            break
    assert terminated and info["game_over"] and info["lives"] == 0
    assert len(lives_seen) >= 3


def test_render_rgb_array() -> None:
    env = make("ALE/Pong-v5", render_mode="rgb_array")
    env.reset(seed=0)
    image = env.render()
    assert image is not None and image.shape == (210, 160, 3) and image.dtype == np.uint8


def test_raw_preset_is_plain_gymnasium_env() -> None:
    env = make("ALE/Pong-v5", preset="raw", seed=0)
    obs, _ = env.reset()
    assert obs["frame"].shape == (3, 210, 160)


def test_area_resize_matches_dense_reference() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (210, 160), dtype=np.uint8)
    reference = area_weights(210, 84) @ image.astype(np.float64) @ area_weights(160, 84).T
    got = AreaResize((210, 160), (84, 84))(image)
    assert np.abs(got - reference).max() <= 0.5 + 1e-4
    flat = np.full((160, 160), 77, np.uint8)
    np.testing.assert_array_equal(AreaResize((160, 160), (42, 42))(flat), 77)
    assert np.allclose(area_weights(210, 84).sum(axis=1), 1.0)
