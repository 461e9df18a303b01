"""Cheap diagnostic tasks, registered as Gymnasium ids under the `gazelle/` namespace.

- `gazelle/Memory-v0` (`MemoryEnv`): needs the LSTM state carried across unrolls.
- `gazelle/Instruction-v0` (`InstructionEnv`): needs the instruction encoder.
- `gazelle/FastAtari-v0` (`FastAtariEnv`): Atari-shaped frames without an emulator.
- `gazelle/Catch-v0` (`gazelle.envs.catch.CatchEnv`): Pong's small ball and rare reward in a
  task that trains in minutes.
- `gazelle/DictObs-v0` (`DictObsEnv`): a Gymnasium Dict observation of four kinds of key,
  one of which (a Discrete) the agent must read.
- `gazelle/Controls-v0` (`diagnostic_actions.ControlsEnv`): a composite action (a Dict of
  MultiBinary buttons, a Discrete dial and a Box lever) whose every part must match a shown
  target.
- `gazelle/Reach-v0` (`diagnostic_actions.ReachEnv`): continuous actions: put a point on a
  target, within a Box whose bounds are neither [-1, 1] nor symmetric.

The others follow gazelle's contract (`frame`, optionally `instruction`); `DictObs` has
Gymnasium's own spaces and goes through the generic adapter. Every step sets
`info["game_over"]`.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from gazelle.envs.adapter import instruction_space
from gazelle.envs.catch import CatchEnv
from gazelle.envs.diagnostic_actions import ControlsEnv, ReachEnv
from gazelle.types import FRAME, INSTRUCTION

StepResult = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


class MemoryEnv(gymnasium.Env):
    """Remember a cue across a delay.

    The first observation shows a cue (`+1` or `-1`); the next `d` observations show none,
    `d` drawn uniformly from `min_delay..delay` per episode. The last of them is the query
    (query channel 1): the action taken on it ends the episode with reward `+1` if it matches
    the cue (action 0 for `+1`, 1 for `-1`), else `wrong_reward`. Earlier actions do nothing.
    An episode is `d + 1` agent steps.

    Episodes with `d` >= the unroll length put cue and query in different unrolls: only an
    agent whose LSTM state is carried across unrolls solves them. The short ones make the
    task learnable with truncated backpropagation through time (with every `d` = 30 and
    unrolls of 20, nothing teaches the LSTM to store the cue).

    `frame` float32 `[3]`: `(cue, query flag, t / delay)`.
    Optimal return 1; any agent without memory of the cue: `(1 + wrong_reward) / 2` (0).
    """

    def __init__(self, delay: int = 30, min_delay: int = 1, wrong_reward: float = -1.0) -> None:
        if not 1 <= min_delay <= delay:
            raise ValueError(f"need 1 <= min_delay <= delay, got {min_delay}, {delay}")
        self.delay, self.min_delay, self.wrong_reward = delay, min_delay, wrong_reward
        self._delay = delay
        self.observation_space = spaces.Dict({FRAME: spaces.Box(-1.0, 1.0, (3,), np.float32)})
        self.action_space = spaces.Discrete(2)
        self._cue, self._t = 0, 0

    def _obs(self) -> dict[str, Any]:
        cue = (1.0 if self._cue == 0 else -1.0) if self._t == 0 else 0.0
        query = 1.0 if self._t == self._delay else 0.0
        return {FRAME: np.array([cue, query, self._t / self.delay], np.float32)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._cue, self._t = int(self.np_random.integers(2)), 0
        self._delay = int(self.np_random.integers(self.min_delay, self.delay + 1))
        return self._obs(), {}

    def step(self, action: Any) -> StepResult:
        if self._t < self._delay:
            self._t += 1
            return self._obs(), 0.0, False, False, {"game_over": False}
        reward = 1.0 if int(action) == self._cue else self.wrong_reward
        return self._obs(), reward, True, False, {"game_over": True}


COLORS = ("red", "green", "blue", "yellow", "purple", "grey")
SHAPES = ("ball", "box", "key")


class InstructionEnv(gymnasium.Env):
    """Choose the item the instruction names.

    Each episode is one step. The frame shows `num_items` slots, each holding an item of a
    distinct colour; the instruction ("go to the red ball") names one of them, uniformly.
    Action `i` picks slot `i`: reward 1 for the named item, else 0.

    By default the items and their slots are the same in every episode (red ball, green box,
    blue key, yellow ball, ...): the frame never changes, so the instruction alone decides
    the answer, which a small instruction encoder learns in a few thousand episodes. With
    `shuffle=True` each episode draws new colours, shapes and slots: the agent must also
    match the named colour against the frame (much slower to learn).

    `frame` float32 `[num_items * 9]`: per slot a one-hot colour (6) and a one-hot shape (3).
    Optimal return 1; an agent that ignores the instruction: `1 / num_items` (0.25).
    """

    def __init__(self, num_items: int = 4, shuffle: bool = False) -> None:
        if not 2 <= num_items <= len(COLORS):
            raise ValueError(f"num_items must be in 2..{len(COLORS)}, got {num_items}")
        self.num_items, self.shuffle = num_items, shuffle
        size = num_items * (len(COLORS) + len(SHAPES))
        self.observation_space = spaces.Dict(
            {FRAME: spaces.Box(0.0, 1.0, (size,), np.float32), INSTRUCTION: instruction_space()}
        )
        self.action_space = spaces.Discrete(num_items)
        self._target = 0
        self._frame, self._text = np.zeros(size, np.float32), ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        if self.shuffle:
            colors = rng.choice(len(COLORS), self.num_items, replace=False)
            shapes = rng.integers(len(SHAPES), size=self.num_items)
        else:
            colors = np.arange(self.num_items)
            shapes = np.arange(self.num_items) % len(SHAPES)
        slots = np.zeros((self.num_items, len(COLORS) + len(SHAPES)), np.float32)
        slots[np.arange(self.num_items), colors] = 1.0
        # why: shape one-hots follow the colour block in each slot.
        slots[np.arange(self.num_items), len(COLORS) + shapes] = 1.0
        self._target = int(rng.integers(self.num_items))
        text = f"go to the {COLORS[colors[self._target]]} {SHAPES[shapes[self._target]]}"
        self._frame, self._text = slots.reshape(-1), text
        return {FRAME: self._frame.copy(), INSTRUCTION: text}, {}

    def step(self, action: Any) -> StepResult:
        reward = 1.0 if int(action) == self._target else 0.0
        # why: a fresh frame (and text object) so that reset's and step's obs share nothing.
        obs = {FRAME: self._frame.copy(), INSTRUCTION: "".join(self._text)}
        return obs, reward, True, False, {"game_over": True}


class DictObsEnv(gymnasium.Env):
    """Read the `target` key of a Dict observation.

    Observation (Gymnasium's spaces, converted by `gazelle.envs.adapter.GymAdapter`):
    `view` uint8 `[8, 8, 3]` random pixels, `position` float32 `[2]` random, `mission` the
    text "press the target button", and `target` `Discrete(num_actions, start=1)`, drawn
    anew at every step. Action `i` is rewarded 1 when `i == target - 1`, else 0; an episode
    lasts `episode_length` steps. Only `target` says what pays: optimal return
    `episode_length` (8); an agent that does not read it, `episode_length / num_actions` (2).
    """

    def __init__(self, num_actions: int = 4, episode_length: int = 8) -> None:
        self.num_actions, self.episode_length = num_actions, episode_length
        self.observation_space = spaces.Dict(
            {
                "view": spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "position": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "mission": instruction_space(),
                "target": spaces.Discrete(num_actions, start=1),
            }
        )
        self.action_space = spaces.Discrete(num_actions)
        self._t, self._target = 0, 1

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        self._target = int(rng.integers(1, self.num_actions + 1))
        return {
            "view": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
            "position": rng.uniform(-1.0, 1.0, 2).astype(np.float32),
            "mission": "press the target button",
            "target": self._target,
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> StepResult:
        reward = 1.0 if int(action) == self._target - 1 else 0.0
        self._t += 1
        done = self._t >= self.episode_length
        return self._obs(), reward, done, False, {"game_over": done}


class FastAtariEnv(gymnasium.Env):
    """Atari-shaped frames at memory-copy speed, for throughput tests.

    `frame` uint8 `[4, 84, 84]` drawn from a fixed pool of `pool_size` random frames; frame
    `k` of the pool rewards action `k % num_actions` with 1 (others 0). Episodes last exactly
    `episode_length` steps (terminated). Optimal return `episode_length`; uniform random
    actions: `episode_length / num_actions`.
    """

    def __init__(
        self, episode_length: int = 200, num_actions: int = 6, pool_size: int = 16
    ) -> None:
        self.episode_length, self.num_actions = episode_length, num_actions
        pool_rng = np.random.default_rng(12345)
        self._pool = pool_rng.integers(0, 256, (pool_size, 4, 84, 84), dtype=np.uint8)
        self.observation_space = spaces.Dict({FRAME: spaces.Box(0, 255, (4, 84, 84), np.uint8)})
        self.action_space = spaces.Discrete(num_actions)
        self._t, self._k = 0, 0

    def _obs(self) -> dict[str, Any]:
        return {FRAME: self._pool[self._k].copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t, self._k = 0, int(self.np_random.integers(len(self._pool)))
        return self._obs(), {}

    def step(self, action: Any) -> StepResult:
        reward = 1.0 if int(action) == self._k % self.num_actions else 0.0
        self._t += 1
        self._k = int(self.np_random.integers(len(self._pool)))
        done = self._t >= self.episode_length
        return self._obs(), reward, done, False, {"game_over": done}


DIAGNOSTIC_IDS = {
    "gazelle/Memory-v0": MemoryEnv,
    "gazelle/Instruction-v0": InstructionEnv,
    "gazelle/FastAtari-v0": FastAtariEnv,
    "gazelle/Catch-v0": CatchEnv,
    "gazelle/DictObs-v0": DictObsEnv,
    "gazelle/Controls-v0": ControlsEnv,
    "gazelle/Reach-v0": ReachEnv,
}


def register() -> None:
    """Register the diagnostic ids with Gymnasium (idempotent)."""
    for env_id, cls in DIAGNOSTIC_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=f"{cls.__module__}:{cls.__name__}")
