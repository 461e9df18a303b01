"""Diagnostic tasks (`gazelle.envs.diagnostic`): optimal and chance returns, obs contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
import pytest

from gazelle.envs import make, obs_spec
from gazelle.envs.diagnostic import COLORS

Policy = Callable[[dict[str, Any], int], int]


def _mean_return(env: gymnasium.Env, policy: Policy, episodes: int) -> tuple[float, int]:
    """Mean return over episodes, and the length of the last episode."""
    returns = []
    for _ in range(episodes):
        obs, _ = env.reset()
        total, t, done = 0.0, 0, False
        while not done:
            obs_next, reward, terminated, truncated, info = env.step(policy(obs, t))
            assert info["game_over"] == (terminated or truncated)
            total, t, done = total + float(reward), t + 1, terminated or truncated
            obs = obs_next
        returns.append(total)
    return float(np.mean(returns)), t


def test_memory_ids_and_spec() -> None:
    env = make("gazelle/Memory-v0", seed=0)
    spec = obs_spec(env)
    assert spec.frame_shape == (3,) and spec.frame_dtype == np.float32
    assert spec.num_actions == 2 and not spec.has_instruction
    assert env.unwrapped.delay == 30


def test_memory_optimal_and_memoryless_returns() -> None:
    env = make("gazelle/Memory-v0", seed=0, delay=12, min_delay=12)
    cue = {"value": 0}

    def remember(obs: dict[str, Any], t: int) -> int:
        if t == 0:
            cue["value"] = 0 if obs["frame"][0] > 0 else 1
        return cue["value"]

    optimal, length = _mean_return(env, remember, 50)
    assert optimal == 1.0 and length == 13
    memoryless, _ = _mean_return(env, lambda obs, t: 0, 400)
    assert abs(memoryless) < 0.15


def test_memory_cue_only_at_first_step() -> None:
    env = make("gazelle/Memory-v0", seed=3, delay=4, min_delay=4)
    seen: dict[float, list[np.ndarray]] = {}
    for _ in range(20):
        obs, _ = env.reset()
        frames = [obs["frame"]]
        for _ in range(4):
            frames.append(env.step(0)[0]["frame"])
        seen.setdefault(float(frames[0][0]), []).append(np.stack(frames[1:]))
    assert set(seen) == {1.0, -1.0}
    # why: after step 0 both cues give identical observations; the query flag is last only.
    np.testing.assert_array_equal(seen[1.0][0], seen[-1.0][0])
    np.testing.assert_array_equal(seen[1.0][0][:, 1], [0, 0, 0, 1])


def test_memory_delays_vary_within_range() -> None:
    env = make("gazelle/Memory-v0", seed=0)
    lengths = {_mean_return(env, lambda obs, t: 0, 1)[1] for _ in range(300)}
    assert min(lengths) >= 2 and max(lengths) <= 31 and len(lengths) > 20
    assert max(lengths) > 21  # some cues are further back than a 20-step unroll


@pytest.mark.parametrize("shuffle", [False, True])
def test_instruction_optimal_and_blind_returns(shuffle: bool) -> None:
    env = make("gazelle/Instruction-v0", seed=0, shuffle=shuffle)
    spec = obs_spec(env)
    assert spec.has_instruction and spec.frame_shape == (4 * 9,) and spec.num_actions == 4

    def read(obs: dict[str, Any], t: int) -> int:
        color = COLORS.index(obs["instruction"].split()[3])
        slots = obs["frame"].reshape(4, 9)
        return int(np.flatnonzero(slots[:, color])[0])

    optimal, length = _mean_return(env, read, 100)
    assert optimal == 1.0 and length == 1
    first_slot, _ = _mean_return(env, lambda obs, t: 0, 2000)
    red_or_first = _mean_return(
        env, lambda obs, t: int(np.argmax(obs["frame"].reshape(4, 9)[:, 0])), 2000
    )[0]
    assert abs(first_slot - 0.25) < 0.04 and abs(red_or_first - 0.25) < 0.04


def test_instruction_text_names_a_present_item() -> None:
    env = make("gazelle/Instruction-v0", seed=1, num_items=3)
    texts, frames = set(), set()
    for _ in range(30):
        obs, _ = env.reset()
        words = obs["instruction"].split()
        assert words[:3] == ["go", "to", "the"] and words[3] in COLORS
        assert env.observation_space.contains(obs)
        texts.add(obs["instruction"])
        frames.add(obs["frame"].tobytes())
    # why: fixed layout by default: one frame, and the instruction picks among 3 items.
    assert texts == {"go to the red ball", "go to the green box", "go to the blue key"}
    assert len(frames) == 1


def test_fast_atari_shapes_and_returns() -> None:
    env = make("gazelle/FastAtari-v0", seed=0, episode_length=50)
    spec = obs_spec(env)
    assert spec.frame_shape == (4, 84, 84) and spec.frame_dtype == np.uint8
    pool = env.unwrapped._pool

    def oracle(obs: dict[str, Any], t: int) -> int:
        k = next(i for i in range(len(pool)) if np.array_equal(pool[i], obs["frame"]))
        return k % 6

    optimal, length = _mean_return(env, oracle, 3)
    assert optimal == 50.0 and length == 50
    rng = np.random.default_rng(0)
    chance, _ = _mean_return(env, lambda obs, t: int(rng.integers(6)), 40)
    assert abs(chance - 50 / 6) < 1.5


def test_fast_atari_returns_fresh_arrays() -> None:
    env = make("gazelle/FastAtari-v0", seed=0)
    obs, _ = env.reset()
    obs["frame"][:] = 0
    assert env.unwrapped._pool.max() > 0


def test_reach_spec_and_its_returns_through_gazelles_action_mapping() -> None:
    """The Box is the action space and the target's range; returns of the policies the
    docstring names, with the Gaussian's samples brought onto the bounds as gazelle does
    (`native_action`): exact aim 0, the middle -0.25, the initial std (1 in units of half the
    range) about -0.28, a fifth of it -0.075, and aiming with actions that stop at [-1, 1]
    (not brought onto the bounds) no better than the middle."""
    from gazelle.envs.action_spaces import native_action

    env = make("gazelle/Reach-v0", seed=0)
    spec = obs_spec(env)
    (component,) = spec.actions.components
    assert component.kind == "gaussian" and component.size == 2
    assert (component.low, component.high) == ((-3.0, 0.5), (1.0, 4.5))
    assert spec.frame_shape == (2,) and spec.frame_dtype == np.float32
    low, high = np.array(component.low), np.array(component.high)
    to_env = native_action(env.action_space)
    rng = np.random.default_rng(0)

    def aim(std: float) -> Policy:
        # the sample u of a Gaussian whose mean is the target in units of half the range
        return lambda obs, t: to_env(
            (obs["frame"] - low) / (high - low) * 2 - 1 + std * rng.normal(size=2)
        )

    assert _mean_return(env, lambda obs, t: obs["frame"], 50) == (0.0, 1)
    middle, _ = _mean_return(env, lambda obs, t: (low + high) / 2, 4000)
    assert middle == pytest.approx(-0.25, abs=0.01)
    assert _mean_return(env, aim(1.0), 4000)[0] == pytest.approx(-0.28, abs=0.01)
    assert _mean_return(env, aim(0.2), 4000)[0] == pytest.approx(-0.075, abs=0.005)
    unit, _ = _mean_return(env, lambda obs, t: np.clip(obs["frame"], -1, 1), 4000)
    assert unit < -0.24


@pytest.mark.parametrize(
    "env_id", ["gazelle/Memory-v0", "gazelle/Instruction-v0", "gazelle/Reach-v0"]
)
def test_registered_with_gymnasium(env_id: str) -> None:
    import gazelle.envs  # noqa: F401  (registers the ids)

    env = gymnasium.make(env_id)
    obs, _ = env.reset(seed=0)
    assert "frame" in obs
