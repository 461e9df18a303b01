"""`--obs-flicker`: each observation blanked with a probability, in every family, from the
flag to the env a run's actors and `gazelle test` make (`gazelle.envs.flicker`)."""

from __future__ import annotations

import numpy as np
import pytest

from gazelle.algorithms.common import env_kwargs
from gazelle.config import Config, ConfigError, validate
from gazelle.envs import make
from gazelle.envs.flicker import Flicker


def _play(env, steps: int, seed: int = 0) -> list[tuple]:
    """(obs, reward, terminated, truncated, blanked) of `steps` steps of a fixed action
    sequence, resetting at each episode's end."""
    actions = np.random.default_rng(seed).integers(0, 2, steps)
    obs, info = env.reset()
    out = [(obs, 0.0, False, False, info.get("obs_blanked"))]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(int(action))
        out.append((obs, reward, terminated, truncated, info.get("obs_blanked")))
        if terminated or truncated:
            obs, info = env.reset()
            out.append((obs, 0.0, False, False, info.get("obs_blanked")))
    return out


def test_a_blanked_step_is_zeros_and_every_other_step_is_the_envs_own():
    plain = _play(make("CartPole-v1", seed=3), 3000)
    flickering = _play(make("CartPole-v1", seed=3, obs_flicker=0.5), 3000)
    assert len(plain) == len(flickering)  # the same episodes: the game is untouched
    blanked = 0
    for (obs, reward, term, trunc, _), (f_obs, f_reward, f_term, f_trunc, f_blank) in zip(
        plain, flickering, strict=True
    ):
        assert (reward, term, trunc) == (f_reward, f_term, f_trunc)
        assert f_blank in (True, False)
        if f_blank:
            blanked += 1
            assert not np.any(f_obs["frame"]) and f_obs["frame"].dtype == obs["frame"].dtype
        else:
            np.testing.assert_array_equal(f_obs["frame"], obs["frame"])
    assert 0.46 < blanked / len(plain) < 0.54  # 3,000+ draws at 0.5: +-4 standard errors


def test_the_blanked_steps_follow_the_envs_seed():
    def pattern(seed: int, probability: float = 0.3) -> list[bool]:
        return [b for *_, b in _play(make("CartPole-v1", seed=seed, obs_flicker=probability), 400)]

    assert pattern(5) == pattern(5)
    assert pattern(5) != pattern(6)
    assert 0.2 < np.mean(pattern(7)) < 0.4


def test_an_image_is_blanked_and_an_instruction_kept():
    env = make("BabyAI-GoToLocalS6N2-v0", seed=1, obs_flicker=0.5)
    seen = []
    obs, info = env.reset()
    for _ in range(40):
        seen.append((obs, info["obs_blanked"]))
        obs, _, terminated, truncated, info = env.step(2)
        if terminated or truncated:
            obs, info = env.reset()
    blanked = [o for o, b in seen if b]
    assert blanked and len(blanked) < len(seen)
    for obs in blanked:
        assert obs["frame"].dtype == np.uint8 and not obs["frame"].any()
        assert isinstance(obs["instruction"], str) and obs["instruction"].startswith("go to")
    assert all(o["frame"].any() for o, b in seen if not b)


def test_the_flag_reaches_the_runs_envs_and_is_checked():
    assert "obs_flicker" not in env_kwargs(Config.of(env="CartPole-v1"))
    config = Config.of(env="CartPole-v1", obs_flicker=0.25)
    validate(config)
    # the actors (`ActorSpec.env_kwargs`) and `gazelle test` both make their envs with these
    env = make(config.env.id, seed=0, **env_kwargs(config))
    assert isinstance(env, Flicker)
    assert not isinstance(make("CartPole-v1", seed=0), Flicker)
    for bad in (1.0, -0.1, 2, True):
        with pytest.raises(
            ConfigError,
            match=rf"--obs-flicker: invalid value {bad!r}; allowed: a probability in \[0, 1\)",
        ):
            validate(Config.of(env="CartPole-v1", obs_flicker=bad))
    with pytest.raises(ValueError, match="obs_flicker must be a probability in"):
        make("CartPole-v1", obs_flicker=1.5)
