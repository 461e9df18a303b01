"""Diagnostic tasks for the action spaces beyond one Discrete, registered by
`gazelle.envs.diagnostic` as `gazelle/Controls-v0` (`ControlsEnv`: a composite action of
buttons, a dial and a lever) and `gazelle/Reach-v0` (`ReachEnv`: a continuous action within
a Box whose bounds are neither [-1, 1] nor symmetric)."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from gazelle.types import FRAME

StepResult = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


class ControlsEnv(gymnasium.Env):
    """Set every control to the target shown: a composite action of three kinds.

    Action: a Dict of `buttons` `MultiBinary(3)`, `dial` `Discrete(3)` and `lever`
    `Box(-2, 2, (1,))`. Observation `frame` float32 `[7]`: the target, drawn anew at every
    step: the three buttons' bits, the dial's one-hot, and the lever's value (uniform in
    [-2, 2]). Reward per step, in [0, 1], a fifth for each of five credits:
    `(matching buttons + [dial matches] + max(0, 1 - |lever - target| / 2)) / 5`.
    At the end of an episode `info["episode_stats"]` holds each part's mean credit over it
    (`buttons` per button, `dial`, `lever`; random controls: 0.5, 0.33, 0.42), so a run's
    logs show which part is learned. Episodes last `episode_length` (8) steps: optimal
    return 8; uniform random controls `8 * (3/2 + 1/3 + 5/12) / 5` (3.6: a uniform lever
    against a uniform target earns 5/12 on average).
    """

    def __init__(self, episode_length: int = 8) -> None:
        self.episode_length = episode_length
        self.observation_space = spaces.Box(-2.0, 2.0, (7,), np.float32)
        self.action_space = spaces.Dict(
            {
                "buttons": spaces.MultiBinary(3),
                "dial": spaces.Discrete(3),
                "lever": spaces.Box(-2.0, 2.0, (1,), np.float32),
            }
        )
        self._t = 0
        self._target = np.zeros(7, np.float32)
        self._credit = np.zeros(3)

    def _obs(self) -> np.ndarray:
        rng = self.np_random
        self._target = np.zeros(7, np.float32)
        self._target[:3] = rng.integers(0, 2, 3)
        self._target[3 + int(rng.integers(3))] = 1.0
        self._target[6] = rng.uniform(-2.0, 2.0)
        return self._target.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t, self._credit = 0, np.zeros(3)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        target = self._target
        matches = float(np.sum(np.asarray(action["buttons"]) == target[:3]))
        dial = float(int(action["dial"]) == int(np.argmax(target[3:6])))
        lever = max(0.0, 1.0 - abs(float(action["lever"][0]) - float(target[6])) / 2.0)
        reward = (matches + dial + lever) / 5.0
        buttons = matches / 3.0
        self._credit += (buttons, dial, lever)
        self._t += 1
        done = self._t >= self.episode_length
        info: dict[str, Any] = {"game_over": done}
        if done:
            parts = dict(zip(("buttons", "dial", "lever"), self._credit / self._t))
            info["episode_stats"] = {name: float(value) for name, value in parts.items()}
        return self._obs(), reward, done, False, info


class ReachEnv(gymnasium.Env):
    """Put the point on the target: a contextual bandit with a continuous action.

    Each step shows a target `t` drawn uniformly inside the action Box (`low`, `high`, both
    `[dims]`, by default neither [-1, 1] nor symmetric); the action `a` is where the point
    goes, and the reward is minus the mean over dimensions of `|a_i - t_i| / (high_i -
    low_i)`, in [-1, 0]. An episode is `episode_length` steps (1 by default: the value of a
    state is then the expected reward of one step, which the baseline can learn; with more
    steps and no clock in the observation it cannot, and its error is the advantages' noise).

    `frame` float32 `[dims]`: the target, in the Box's own coordinates.
    Optimal return 0 per step. An agent that ignores the target (the Box's middle): -0.25.
    One that aims at the target with the Gaussian's initial std (half the range), clipped at
    the bounds: about -0.28; with a fifth of that std, -0.075. One whose actions reach only
    [-1, 1] (not brought onto the bounds): at best about -0.25.
    """

    LOW = (-3.0, 0.5)
    HIGH = (1.0, 4.5)

    def __init__(
        self,
        low: tuple[float, ...] = LOW,
        high: tuple[float, ...] = HIGH,
        episode_length: int = 1,
    ) -> None:
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        if self.low.shape != self.high.shape or not np.all(self.low < self.high):
            raise ValueError(f"need low < high of one shape, got {low} and {high}")
        self.episode_length = episode_length
        self.observation_space = spaces.Dict(
            {FRAME: spaces.Box(self.low, self.high, dtype=np.float32)}
        )
        self.action_space = spaces.Box(self.low, self.high, dtype=np.float32)
        self._t, self._target = 0, self.low.copy()

    def _obs(self) -> dict[str, Any]:
        self._target = self.np_random.uniform(self.low, self.high).astype(np.float32)
        return {FRAME: self._target.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> StepResult:
        point = np.asarray(action, np.float64).reshape(self.low.shape)
        error = np.abs(point - self._target) / (self.high - self.low)
        reward = -float(error.mean())
        self._t += 1
        done = self._t >= self.episode_length
        return self._obs(), reward, done, False, {"game_over": done}
