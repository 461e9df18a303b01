"""DeepMind Lab levels through the `deepmind_lab` Python API (spec `dmlab:<level>`).

As in the IMPALA seed: a discrete set of 9 actions mapped to DMLab's 7-int action vectors,
each repeated `num_action_repeats` (4) frames; `RGB_INTERLEAVED` frames (96x72 by default)
-> `frame` uint8 `[3, H, W]`; the `INSTR` text -> `instruction` (empty on non-language levels);
test mode adds DMLab's hold-out levels and the evaluation mixer seed.

`deepmind_lab` is not on PyPI: it is built from source with Bazel (see the build and Python
API documentation of the deepmind/lab repository on GitHub, which produce a pip-installable
`deepmind_lab` package).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from gazelle.envs.adapter import instruction_space
from gazelle.envs.dmlab30 import level_path
from gazelle.types import FRAME, INSTRUCTION

#: The seed's action set, as DMLab action vectors `(look_left_right_pixels_per_frame,
#: look_down_up_pixels_per_frame, strafe_left_right, move_back_forward, fire, jump, crouch)`.
DEFAULT_ACTION_SET: tuple[tuple[int, ...], ...] = (
    (0, 0, 0, 1, 0, 0, 0),  # forward
    (0, 0, 0, -1, 0, 0, 0),  # backward
    (0, 0, -1, 0, 0, 0, 0),  # strafe left
    (0, 0, 1, 0, 0, 0, 0),  # strafe right
    (-20, 0, 0, 0, 0, 0, 0),  # look left
    (20, 0, 0, 0, 0, 0, 0),  # look right
    (-20, 0, 0, 1, 0, 0, 0),  # look left + forward
    (20, 0, 0, 1, 0, 0, 0),  # look right + forward
    (0, 0, 0, 0, 1, 0, 0),  # fire
)
#: DMLab's mixer seed for evaluation runs (see DMLab's Python API docs, `mixerSeed`).
TEST_MIXER_SEED = 0x600D5EED

MISSING_MESSAGE = (
    "DeepMind Lab's Python module `deepmind_lab` is not importable. It is not on PyPI: build "
    "it from source with Bazel and pip-install the package it produces (see the build "
    "instructions and the Python API documentation in the deepmind/lab repository on "
    "GitHub), then run in that Python environment."
)


def import_deepmind_lab() -> Any:
    """Import `deepmind_lab`, or raise an ImportError that says how to get it."""
    try:
        import deepmind_lab
    except ImportError as error:
        raise ImportError(MISSING_MESSAGE) from error
    return deepmind_lab


class LevelCache:
    """DMLab's level cache: compiled maps (`.pk3`) kept in a directory across runs.

    DMLab calls `fetch(key, pk3_path)` before compiling a map (True: the cached file was
    copied to `pk3_path`, no compile) and `write(key, pk3_path)` after compiling one.
    """

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self.cache_dir = os.fspath(cache_dir)
        os.makedirs(self.cache_dir, exist_ok=True)

    def fetch(self, key: str, pk3_path: str) -> bool:
        path = os.path.join(self.cache_dir, key)
        if not os.path.isfile(path):
            return False
        shutil.copyfile(path, pk3_path)
        return True

    def write(self, key: str, pk3_path: str) -> None:
        path = os.path.join(self.cache_dir, key)
        if os.path.isfile(path):
            return
        # why: many actors write the same key at once; copy to a private temp file, then
        # rename atomically so no reader ever sees a half-written map.
        fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=".tmp-")
        os.close(fd)
        try:
            shutil.copyfile(pk3_path, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def lab_config(
    width: int, height: int, test_mode: bool, dataset_path: str | None, extra: dict[str, Any]
) -> dict[str, str]:
    """The `config` dict for `deepmind_lab.Lab` (DMLab takes string values only)."""
    config: dict[str, Any] = {"width": width, "height": height}
    if dataset_path is not None:
        config["datasetPath"] = dataset_path
    if test_mode:
        config["allowHoldOutLevels"] = "true"
        config["mixerSeed"] = TEST_MIXER_SEED
    config.update(extra)
    return {key: str(value) for key, value in config.items()}


class DmLabEnv(gymnasium.Env):
    """One DeepMind Lab level as a Gymnasium env.

    Args:
        level: level name, e.g. `explore_goal_locations_small` (DMLab-30 levels are looked up
            under `contributed/dmlab30/`) or any path DMLab knows (`seekavoid_arena_01`).
        num_action_repeats: DMLab frames per agent step (`num_steps` of `Lab.step`).
        width, height: frame size in pixels.
        test_mode: `allowHoldOutLevels='true'` and `mixerSeed=0x600D5EED`.
        dataset_path: `datasetPath` (needed by levels using external datasets, e.g. Psychlab's
            and the language levels' data).
        level_cache_dir: directory of a shared `LevelCache` (None: no cache).
        renderer: `"software"` or `"hardware"`.
        action_set: DMLab action vectors, one per discrete action.
        with_instruction: request `INSTR` and expose the `instruction` observation.
        seed: seeds the per-episode DMLab seeds at the first `reset()` not given a seed.
        config: further `Lab` config entries.

    An episode ends (`terminated`, as in the seed) when DMLab stops running; its last
    observation is the one before the end, since DMLab has none after.
    """

    metadata = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        level: str,
        *,
        num_action_repeats: int = 4,
        width: int = 96,
        height: int = 72,
        test_mode: bool = False,
        dataset_path: str | None = None,
        level_cache_dir: str | None = None,
        renderer: str = "software",
        action_set: tuple[tuple[int, ...], ...] = DEFAULT_ACTION_SET,
        with_instruction: bool = True,
        seed: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        lab_module = import_deepmind_lab()
        if num_action_repeats < 1:
            raise ValueError(f"num_action_repeats must be >= 1, got {num_action_repeats}")
        self.level = level
        self._repeats = num_action_repeats
        self._actions = [np.array(a, dtype=np.intc) for a in action_set]
        self._with_instruction = with_instruction
        names = ["RGB_INTERLEAVED", "INSTR"] if with_instruction else ["RGB_INTERLEAVED"]
        self.config = lab_config(width, height, test_mode, dataset_path, config or {})
        cache = LevelCache(level_cache_dir) if level_cache_dir is not None else None
        self._lab = lab_module.Lab(
            level_path(level), names, config=self.config, renderer=renderer, level_cache=cache
        )
        obs_spaces: dict[str, spaces.Space] = {
            FRAME: spaces.Box(0, 255, (3, height, width), np.uint8)
        }
        if with_instruction:
            obs_spaces[INSTRUCTION] = instruction_space()
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = spaces.Discrete(len(self._actions))
        self._pending_seed = seed
        self._last_obs: dict[str, Any] | None = None

    def _observe(self) -> dict[str, Any]:
        raw = self._lab.observations()
        obs: dict[str, Any] = {
            FRAME: np.ascontiguousarray(np.transpose(raw["RGB_INTERLEAVED"], (2, 0, 1)))
        }
        if self._with_instruction:
            text = raw["INSTR"]
            if isinstance(text, np.ndarray):
                text = text.item()
            obs[INSTRUCTION] = text.decode() if isinstance(text, bytes) else str(text)
        self._last_obs = obs
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode with a DMLab seed drawn from this env's generator."""
        if seed is None:
            seed, self._pending_seed = self._pending_seed, None
        super().reset(seed=seed)
        self._lab.reset(seed=int(self.np_random.integers(0, 2**31 - 1)))
        return self._observe(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Apply the action vector of `action` for `num_action_repeats` frames."""
        reward = float(self._lab.step(self._actions[int(action)], num_steps=self._repeats))
        running = self._lab.is_running()
        if running:
            obs = self._observe()
        else:
            assert self._last_obs is not None, "step() before reset()"
            obs = {
                k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self._last_obs.items()
            }
        return obs, reward, not running, False, {"game_over": not running}

    def close(self) -> None:
        self._lab.close()
