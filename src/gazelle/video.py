"""Episode videos for `gazelle test --video N`: animated GIFs of the env's colour frames.

The frames are the env's own `render()` in `rgb_array` mode (Atari: the full 210x160 colour
screen, not the 84x84 grayscale the agent sees), one per agent step, played back at the
game's speed (`render_fps / action repeats`). GIFs need nothing beyond Pillow and play in any
browser, notebook or chat window; `MAX_FRAMES` caps a clip's length and size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: At most this many frames per clip (5 minutes of Atari play at 15 agent steps/s).
MAX_FRAMES = 4500
#: GIF frame durations are whole centiseconds in most players: never faster than 50 fps.
MIN_FRAME_MS = 20


class EpisodeRecorder:
    """Collects the colour frames of the first `episodes` episodes of one env.

    Call `frame(episode)` after every `reset` and `step` with the index of the episode the
    frame belongs to; frames of later episodes, and past `max_frames`, are dropped.
    """

    def __init__(self, env: Any, episodes: int, max_frames: int = MAX_FRAMES) -> None:
        if getattr(env, "render_mode", None) != "rgb_array":
            raise ValueError("the env was not made with render_mode='rgb_array'")
        self.env, self.episodes, self.max_frames = env, episodes, max_frames
        self.clips: list[list[np.ndarray]] = [[] for _ in range(episodes)]

    def frame(self, episode: int) -> None:
        if episode < self.episodes and len(self.clips[episode]) < self.max_frames:
            image = np.asarray(self.env.render(), dtype=np.uint8)
            if image.ndim != 3 or image.shape[-1] != 3:
                raise ValueError(f"render() gave an array of shape {image.shape}, not [H, W, 3]")
            self.clips[episode].append(image.copy())


def save_gif(frames: Sequence[np.ndarray], path: str | Path, fps: float) -> Path:
    """Write `frames` (uint8 `[H, W, 3]` each) as a looping animated GIF at `fps`."""
    from PIL import Image

    if not frames:
        raise ValueError(f"no frames to write to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(np.ascontiguousarray(f)) for f in frames]
    duration = max(MIN_FRAME_MS, round(1000.0 / max(fps, 1e-6)))
    images[0].save(
        path, save_all=True, append_images=images[1:], duration=duration, loop=0, disposal=1
    )
    return path


def clip_name(level: str, episode: int) -> str:
    """File name of a level's clip: `ALE/Pong-v5`, 0 -> `ALE_Pong-v5-0.gif`."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', level)}-{episode}.gif"
