"""Adapt any Gymnasium env to gazelle's observation and action contract.

Observations become a dict in gazelle's form (`gazelle.envs.spaces`). A bare space becomes
`{"frame": ...}`: image Boxes (uint8, rank 2 or 3, Gymnasium's `[H, W, C]` layout) become
uint8 `[C, H, W]`; every other supported space a float32 vector `[D]` (Discrete and
MultiDiscrete one-hot). A Dict keeps its keys, each converted by its space (`key_converter`):
images as above, other Boxes and MultiBinary float32 vectors, Discrete and MultiDiscrete
indices from 0 (embedded by the agent), Text as text; the key `frame` is taken as already in
gazelle's form (uint8 `[C, H, W]` or a vector) and `instruction` as text. The action space
stays the env's own: the env batch reads it (`gazelle.envs.action_spaces`) and hands each
env its native action.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces

from gazelle.envs.spaces import is_text
from gazelle.types import FRAME, INSTRUCTION, RESERVED_KEYS

#: Longest instruction text accepted by the `instruction` space.
MAX_INSTRUCTION_CHARS = 1024

Obs = dict[str, Any]


def instruction_space() -> spaces.Text:
    """The `instruction` space: printable text, possibly empty."""
    return spaces.Text(MAX_INSTRUCTION_CHARS, min_length=0, charset=string.printable)


def _is_contract_dict(space: spaces.Space) -> bool:
    if not isinstance(space, spaces.Dict) or FRAME not in space.spaces:
        return False
    frame = space.spaces[FRAME]
    extra = set(space.spaces) - {FRAME, INSTRUCTION}
    if extra or not isinstance(frame, spaces.Box):
        return False
    image = frame.dtype == np.uint8 and len(frame.shape) == 3
    vector = frame.dtype == np.float32 and len(frame.shape) == 1
    return image or vector


def frame_converter(space: spaces.Space) -> tuple[spaces.Box[Any], Callable[[Any], np.ndarray]]:
    """Return the `frame` Box for a native observation space and a function converting to it.

    Raises:
        ValueError: the space is not a Box, Discrete, MultiDiscrete or MultiBinary.
    """
    if isinstance(space, spaces.Box):
        if space.dtype == np.uint8 and len(space.shape) == 3:
            h, w, c = space.shape
            box: spaces.Box[Any] = spaces.Box(0, 255, (c, h, w), np.uint8)
            return box, lambda o: np.ascontiguousarray(np.transpose(o, (2, 0, 1)))
        if space.dtype == np.uint8 and len(space.shape) == 2:
            box = spaces.Box(0, 255, (1, *space.shape), np.uint8)
            return box, lambda o: np.asarray(o, np.uint8)[None]
        size = int(np.prod(space.shape))
        box = spaces.Box(-np.inf, np.inf, (size,), np.float32)
        return box, lambda o: np.asarray(o, np.float32).reshape(size)
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        eye = np.eye(n, dtype=np.float32)
        return spaces.Box(0.0, 1.0, (n,), np.float32), lambda o: eye[int(o) - start].copy()
    if isinstance(space, spaces.MultiBinary):
        size = int(np.prod(space.shape))
        box = spaces.Box(0.0, 1.0, (size,), np.float32)
        return box, lambda o: np.asarray(o, np.float32).reshape(size)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = space.nvec.reshape(-1).astype(np.int64)
        # why: offsets place each component's one-hot block after the previous ones.
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        total = int(nvec.sum())

        def one_hot(o: Any) -> np.ndarray:
            out = np.zeros(total, np.float32)
            out[offsets + (np.asarray(o).reshape(-1) - space.start.reshape(-1))] = 1.0
            return out

        return spaces.Box(0.0, 1.0, (total,), np.float32), one_hot
    raise ValueError(
        f"unsupported observation space {space}: gazelle takes Box, Discrete, MultiDiscrete, "
        "MultiBinary, or a Dict of them (and Text)"
    )


def key_name(key: Any) -> str:
    """The obs dict key gazelle uses for a Dict space's `key`: as text, `.` as `_`, and
    `obs_<key>` for a name the unroll uses itself (`gazelle.types.RESERVED_KEYS`)."""
    name = str(key).replace(".", "_") or "obs_"
    return f"obs_{name}" if name in RESERVED_KEYS else name


def key_converter(key: str, space: spaces.Space) -> tuple[spaces.Space, Callable[[Any], Any]]:
    """The converted space of one key of a Dict observation and the function converting a
    value to it (see the module docstring).

    Raises:
        ValueError: a space gazelle cannot take (a nested Dict, Tuple, Graph, ...).
    """
    if is_text(space):
        return instruction_space(), str
    frame_image = len(space.shape or ()) == 3 and space.dtype == np.uint8
    if key == FRAME and isinstance(space, spaces.Box) and frame_image:
        return space, lambda o: np.asarray(o, np.uint8)  # why: `frame` is [C, H, W]
    if isinstance(space, spaces.Discrete):
        n, start = int(space.n), int(space.start)
        return spaces.MultiDiscrete([n]), lambda o: np.array([int(o) - start], np.int64)
    if isinstance(space, spaces.MultiDiscrete):
        nvec, starts = space.nvec.reshape(-1), space.start.reshape(-1)
        return spaces.MultiDiscrete(nvec), lambda o: np.asarray(o, np.int64).reshape(-1) - starts
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        return frame_converter(space)
    raise ValueError(
        f"unsupported observation space {space} of key {key!r}: gazelle takes Box, Discrete, "
        "MultiDiscrete, MultiBinary and Text in a Dict (no nested Dict or Tuple)"
    )


def dict_converter(space: spaces.Dict) -> tuple[spaces.Dict, Callable[[Any], Obs]]:
    """A Dict observation space in gazelle's form, and the converting function."""
    converters = {
        key: (key_name(key), *key_converter(key_name(key), sub)) for key, sub in space.items()
    }
    names = [name for name, _, _ in converters.values()]
    if len(set(names)) != len(names):
        raise ValueError(f"observation keys {list(space)} clash once renamed: {names}")
    out = spaces.Dict({name: sub for name, sub, _ in converters.values()})
    return out, lambda o: {name: fn(o[key]) for key, (name, _, fn) in converters.items()}


class GymAdapter(gymnasium.Wrapper):
    """Wrap a Gymnasium env into gazelle's obs dict contract, with action repeats.

    Args:
        env: any Gymnasium env.
        num_action_repeats: each agent action is applied this many times (rewards summed,
            stopping early at an episode end).
        seed: used by the first `reset()` that is given no seed.
        convert: optional `(space, fn)` replacing the default observation conversion; `fn`
            maps a native observation to the obs dict.

    `info["game_over"]` is set on every step (True when the episode ended), unless the
    wrapped env sets it itself.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        *,
        num_action_repeats: int = 1,
        seed: int | None = None,
        convert: tuple[spaces.Dict, Callable[[Any], Obs]] | None = None,
    ) -> None:
        super().__init__(env)
        if num_action_repeats < 1:
            raise ValueError(f"num_action_repeats must be >= 1, got {num_action_repeats}")
        self._repeats = num_action_repeats
        self._pending_seed = seed
        obs_space: spaces.Space[Any]
        if convert is not None:
            obs_space, self._convert = convert
        elif _is_contract_dict(env.observation_space):
            obs_space = env.observation_space
            self._convert = dict
        elif isinstance(env.observation_space, spaces.Dict):
            obs_space, self._convert = dict_converter(env.observation_space)
        else:
            box, frame_fn = frame_converter(env.observation_space)
            obs_space = spaces.Dict({FRAME: box})
            self._convert = lambda o: {FRAME: frame_fn(o)}
        self.observation_space = obs_space
        if seed is not None:
            self.action_space.seed(seed)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        obs, info = self.env.reset(seed=seed, options=options)
        return self._convert(obs), info

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        total = 0.0
        for _ in range(self._repeats):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        info.setdefault("game_over", bool(terminated or truncated))
        return self._convert(obs), total, bool(terminated), bool(truncated), info
