"""Small deterministic envs for tests/test_vector.py.

Kept in their own module (not a test file) so that spawned worker processes can import the
factories by name: spawn copies the parent's `sys.path`, where pytest put `tests/`.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

FRAME_SHAPE = (4, 8, 8)


class CounterEnv(gym.Env):
    """Deterministic env: every value is a function of the seed, the step and the action.

    Args:
        num_actions: size of the Discrete action space.
        term_at: the episode terminates at this step (None: never).
        trunc_at: the episode is truncated at this step (None: never).
        lives: > 1 makes a termination lose a life (`info["game_over"] = False`) until the
            last one; reset() after a lost life continues the game.
        instruction: add a Text `instruction` to the observation.
        raise_step_at: step() raises ValueError on this call (counted over the env's life).
        raise_reset_at: reset() raises ValueError on this call (counted likewise).
        hang_at: step() sleeps for a minute on this call.
    """

    def __init__(
        self,
        num_actions: int = 3,
        term_at: int | None = None,
        trunc_at: int | None = None,
        lives: int = 1,
        instruction: bool = False,
        raise_step_at: int | None = None,
        raise_reset_at: int | None = None,
        hang_at: int | None = None,
    ) -> None:
        spaces: dict[str, gym.Space] = {
            "frame": gym.spaces.Box(0, 255, FRAME_SHAPE, dtype=np.uint8)
        }
        if instruction:
            spaces["instruction"] = gym.spaces.Text(max_length=32)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Discrete(num_actions)
        self._term_at, self._trunc_at, self._max_lives = term_at, trunc_at, lives
        self._raise_step_at, self._raise_reset_at, self._hang_at = (
            raise_step_at,
            raise_reset_at,
            hang_at,
        )
        self._steps = self._resets = self._episode = self._t = self._last_action = 0
        self._base = 0
        self._lives = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._resets += 1
        if self._resets == self._raise_reset_at:
            raise ValueError("reset failed on purpose")
        if self._lives <= 0:  # a new game; otherwise continue after a lost life
            self._lives = self._max_lives
            self._base = int(self.np_random.integers(0, 200))
        self._episode += 1
        self._t = self._last_action = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self._steps += 1
        if self._steps == self._raise_step_at:
            raise ValueError("step failed on purpose")
        if self._steps == self._hang_at:
            time.sleep(60)
        self._t += 1
        self._last_action = int(action)
        reward = float((self._base + self._t * (int(action) + 1)) % 5)
        terminated = self._t == self._term_at
        truncated = not terminated and self._t == self._trunc_at
        info: dict[str, Any] = {}
        if terminated:
            self._lives -= 1
            info["game_over"] = self._lives <= 0
        elif truncated:
            self._lives = 0
        return self._obs(), reward, terminated, truncated, info

    def _obs(self) -> dict[str, Any]:
        frame = np.full(FRAME_SHAPE, (self._base + 3 * self._t) % 256, dtype=np.uint8)
        frame[0, 0, 0] = self._t
        frame[1, 0, 0] = self._last_action
        obs: dict[str, Any] = {"frame": frame}
        if "instruction" in self.observation_space.spaces:
            obs["instruction"] = f"go {self._base} ep {self._episode}"
        return obs


def make_counter(**kwargs: Any) -> CounterEnv:
    """Module-level factory (picklable through functools.partial)."""
    return CounterEnv(**kwargs)


def make_broken(**kwargs: Any) -> CounterEnv:
    """A factory that fails: the env cannot be built."""
    raise RuntimeError("cannot build this env")
