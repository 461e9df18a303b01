"""Flickering observations: any env made partially observed, to test an agent's memory.

`--obs-flicker P` (`make(spec, obs_flicker=P)`): at each step, and at each reset, the
observation is blanked with probability `P`: every numeric field (an image, a vector,
discrete features) is replaced by zeros of its shape and type. An instruction's text, the
reward, the episode's end and `info` are kept. On a blank step a memoryless agent acts on
nothing; an agent with a memory acts on what it saw before. Hausknecht & Stone (2015,
"Deep Recurrent Q-Learning for Partially Observable MDPs") made Atari partially observed
this way ("flickering Pong", P = 0.5) to compare a recurrent agent with a feed-forward one.

The draws are the env's own: seeded from the env's seed (`[seed, FLICKER_STREAM]`, a
stream apart from the game's), so a seeded run blanks the same steps again; unseeded, they
are random. Evaluation (`gazelle test`) flickers as training did (the flag is saved with
the run).
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np

__all__ = ["FLICKER_STREAM", "Flicker", "blank"]

#: Second word of the blanking stream's seed: apart from any stream the env seeds itself.
FLICKER_STREAM = 0xF11C

Obs = dict[str, Any]


def blank(obs: Obs) -> Obs:
    """`obs` with every numeric field zeroed (same shape and dtype); text fields kept."""
    return {
        key: value if isinstance(value, str) else np.zeros_like(value) for key, value in obs.items()
    }


class Flicker(gymnasium.Wrapper):
    """Blank each observation of `env` (gazelle's obs dict) with probability `probability`.

    Args:
        env: an env made by `gazelle.envs.make` (observations in gazelle's dict form).
        probability: the chance that a step's (or a reset's) observation is blank, in (0, 1).
        seed: seeds the blanking draws; None: fresh entropy.

    `info["obs_blanked"]` says whether the step's observation was blanked.
    """

    def __init__(self, env: gymnasium.Env, probability: float, seed: int | None = None) -> None:
        super().__init__(env)
        if isinstance(probability, bool) or not 0.0 < float(probability) < 1.0:
            raise ValueError(
                f"obs_flicker must be a probability in (0, 1), got {probability!r} "
                "(0 turns flickering off)"
            )
        self._probability = float(probability)
        self._rng = np.random.default_rng(None if seed is None else [seed, FLICKER_STREAM])

    def _flicker(self, obs: Obs, info: dict[str, Any]) -> Obs:
        blanked = bool(self._rng.random() < self._probability)
        info["obs_blanked"] = blanked
        return blank(obs) if blanked else obs

    def reset(self, **kwargs: Any) -> tuple[Obs, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self._flicker(obs, info), info

    def step(self, action: Any) -> tuple[Obs, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._flicker(obs, info), reward, terminated, truncated, info
