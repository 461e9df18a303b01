"""A small fake of DeepMind Lab's `deepmind_lab` Python API, for tests only.

Tests insert it as `sys.modules["deepmind_lab"]`; nothing under src/ imports it. It mimics
the parts gazelle uses: `Lab(level, observations, config, renderer, level_cache)`,
`reset(seed=...)`, `step(action, num_steps)`, `observations()`, `is_running()`,
`num_steps()`, `action_spec()`, `observation_spec()`, `close()`.

Behaviour, chosen so that tests can check the adapter:
- an episode lasts `EPISODE_FRAMES` frames (config `fakeEpisodeFrames` overrides);
- each frame's reward is the action's `MOVE_BACK_FORWARD` component (forward +1, back -1);
- `RGB_INTERLEAVED` `[H, W, 3]`: channel 0 = frames so far % 256, channel 1 = column index,
  channel 2 = row index; `INSTR` is a fixed sentence on `language_*` levels, else "";
- a level cache is asked to `fetch` a compiled map first and given it to `write` after a
  (fake) compile, as DMLab does.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any

import numpy as np

EPISODE_FRAMES = 40
ACTION_NAMES = (
    "LOOK_LEFT_RIGHT_PIXELS_PER_FRAME",
    "LOOK_DOWN_UP_PIXELS_PER_FRAME",
    "STRAFE_LEFT_RIGHT",
    "MOVE_BACK_FORWARD",
    "FIRE",
    "JUMP",
    "CROUCH",
)
INSTRUCTION = "Pick the red object"
OBSERVATION_NAMES = ("RGB_INTERLEAVED", "RGB", "INSTR")

#: Every Lab created, newest last (tests inspect them).
instances: list[Lab] = []


class Lab:
    def __init__(
        self,
        level: str,
        observations: list[str],
        config: dict[str, str] | None = None,
        renderer: str = "software",
        level_cache: Any = None,
    ) -> None:
        config = dict(config or {})
        for key, value in config.items():
            if not isinstance(value, str):
                raise TypeError(f"config values must be str, got {key}={value!r}")
        for name in observations:
            if name not in OBSERVATION_NAMES:
                raise ValueError(f"unknown observation {name!r}")
        if renderer not in ("software", "hardware"):
            raise ValueError(f"unknown renderer {renderer!r}")
        self.level, self.observation_names, self.config = level, list(observations), config
        self.renderer, self.level_cache = renderer, level_cache
        self.width = int(config.get("width", "320"))
        self.height = int(config.get("height", "240"))
        self.episode_frames = int(config.get("fakeEpisodeFrames", str(EPISODE_FRAMES)))
        self.compiled = self._load_map()
        self.actions: list[tuple[tuple[int, ...], int]] = []
        self.seeds: list[int | None] = []
        self.closed = False
        self._frames = 0
        self._running = False
        instances.append(self)

    def _load_map(self) -> bool:
        """Fetch the map from the cache or 'compile' it; True when compiled."""
        text = f"{self.level}|{sorted(self.config.items())!r}"
        key = hashlib.sha1(text.encode()).hexdigest()
        with tempfile.TemporaryDirectory() as tmp:
            pk3 = os.path.join(tmp, "map.pk3")
            if self.level_cache is not None and self.level_cache.fetch(key, pk3):
                with open(pk3, "rb") as f:
                    assert f.read() == b"compiled " + self.level.encode()
                return False
            with open(pk3, "wb") as f:
                f.write(b"compiled " + self.level.encode())
            if self.level_cache is not None:
                self.level_cache.write(key, pk3)
        return True

    def reset(self, episode: int = -1, seed: int | None = None) -> None:
        self.seeds.append(seed)
        self._frames, self._running = 0, True

    def step(self, action: np.ndarray, num_steps: int = 1) -> float:
        if not self._running:
            raise RuntimeError("step() on a finished episode; call reset()")
        if not isinstance(action, np.ndarray) or action.dtype != np.intc or action.shape != (7,):
            raise TypeError(f"action must be an intc array of shape (7,), got {action!r}")
        self.actions.append((tuple(int(a) for a in action), num_steps))
        frames = min(num_steps, self.episode_frames - self._frames)
        self._frames += frames
        if self._frames >= self.episode_frames:
            self._running = False
        return float(frames * int(action[3]))

    def observations(self) -> dict[str, Any]:
        if not self._running:
            raise RuntimeError("no observations after the episode ended")
        out: dict[str, Any] = {}
        if "RGB_INTERLEAVED" in self.observation_names:
            frame = np.zeros((self.height, self.width, 3), np.uint8)
            frame[..., 0] = self._frames % 256
            frame[..., 1] = (np.arange(self.width) % 256)[None, :]
            frame[..., 2] = (np.arange(self.height) % 256)[:, None]
            out["RGB_INTERLEAVED"] = frame
        if "INSTR" in self.observation_names:
            language = self.level.split("/")[-1].startswith("language_")
            out["INSTR"] = INSTRUCTION if language else ""
        return out

    def is_running(self) -> bool:
        return self._running

    def num_steps(self) -> int:
        return self._frames

    def action_spec(self) -> list[dict[str, Any]]:
        return [{"name": name, "min": -1024, "max": 1024} for name in ACTION_NAMES]

    def observation_spec(self) -> list[dict[str, Any]]:
        return [
            {"name": "RGB_INTERLEAVED", "shape": (self.height, self.width, 3), "dtype": np.uint8},
            {"name": "RGB", "shape": (3, self.height, self.width), "dtype": np.uint8},
            {"name": "INSTR", "shape": (), "dtype": str},
        ]

    def close(self) -> None:
        self.closed = True
