"""One env of a `SerialEnvs` batch (`EnvSlot`) and the batch's arrays (`BatchArrays`).

`EnvSlot` holds the per-env logic: step, auto-reset, episode totals, error recovery, and
writing row `i` of the batch arrays, which `SerialEnvs` (`gazelle.envs.batch`) hands out.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from gazelle.envs.action_spaces import native_action
from gazelle.types import FRAME, TEXT, ObsSpec

log = logging.getLogger(__name__)


@dataclass
class BatchArrays:
    """The arrays of a batch of `N` envs; row `i` belongs to env `i`.

    Attributes:
        action: `[N, *actions.shape]` of the action spec's dtype (int64 `[N]` for one
            discrete action set), written by the batch before a step.
        reward: float32 `[N]`.
        terminated, truncated, game_over: bool `[N]`.
        episode_return: float32 `[N]`, game total so far (see `gazelle.envs.batch`).
        episode_length: int64 `[N]`.
        obs: field name -> `[N, *shape]` of the field's dtype, the current observation of
            each env, for every field but text (`text` keeps those).
        final_obs: the same for the last observation of an episode that ended at this step
            (meaningful only in the rows of envs that ended).
        text: text field name -> `N` strings (current observation).
    """

    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    game_over: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    obs: dict[str, np.ndarray]
    final_obs: dict[str, np.ndarray]
    text: dict[str, list[str]]

    @classmethod
    def zeros(cls, num_envs: int, spec: ObsSpec) -> BatchArrays:
        """Zeroed arrays for `num_envs` envs with observations described by `spec`."""
        n = num_envs
        arrays = [f for f in spec.fields if f.kind != TEXT]
        return cls(
            action=spec.actions.zeros(n),
            reward=np.zeros(n, np.float32),
            terminated=np.zeros(n, np.bool_),
            truncated=np.zeros(n, np.bool_),
            game_over=np.zeros(n, np.bool_),
            episode_return=np.zeros(n, np.float32),
            episode_length=np.zeros(n, np.int64),
            obs={f.name: np.zeros((n, *f.shape), f.dtype) for f in arrays},
            final_obs={f.name: np.zeros((n, *f.shape), f.dtype) for f in arrays},
            text={f.name: [""] * n for f in spec.fields if f.kind == TEXT},
        )


def _nonfinite(reward: Any, obs: dict[str, Any]) -> str | None:
    """What is NaN or infinite in a step's output ("reward nan", "observation frame"), or
    None."""
    if not np.isfinite(reward):
        return f"reward {float(reward)!r}"
    for name, value in obs.items():
        if isinstance(value, str):
            continue
        array = np.asarray(value)
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            return f"observation {name}"
    return None


def as_dict(obs: Any) -> dict[str, Any]:
    """An env observation as a dict (a bare Box array is the `frame`)."""
    return obs if isinstance(obs, dict) else {FRAME: obs}


class EnvSlot:
    """Env `index` of a batch: steps it and writes row `index` of the batch arrays.

    Episode totals (`episode_return`, `episode_length`) accumulate until the *game* ends
    (`info.get("game_over", True)` on an end), so with life-loss episodes they are game
    totals. An exception in `step` or `reset` resets the env (rebuilding it from its factory
    when `reset` itself raised) and is returned as an error message.
    """

    def __init__(
        self,
        index: int,
        env: gym.Env,
        env_fn: Callable[[], gym.Env],
        seed: int | None,
        arrays: BatchArrays,
        action_bounds: str = "clip",
    ) -> None:
        self.index = index
        self.env = env
        self._bounds = action_bounds
        #: The stored action -> the env's native action (`gazelle.envs.action_spaces`).
        self._native = native_action(env.action_space, action_bounds)
        self._env_fn = env_fn
        self._seed = seed
        self._first_seed = seed
        self._rebuilds = 0
        self._arrays = arrays
        self._return = 0.0
        self._length = 0
        #: Text fields of the final observation when the last step ended an episode.
        self.final_text: dict[str, str] = {}
        #: The env's `info["episode_stats"]` when the last step ended a game, else {}.
        self.stats: dict[str, float] = {}
        #: Whether the last step ended an episode (or failed).
        self.ended = False

    def reset(self) -> None:
        """Start a new game (env reset, totals to 0); the first reset uses the env's seed."""
        self._return, self._length = 0.0, 0
        error = self._reset_row()
        if error is not None:
            log.warning("env %d: %s (env rebuilt)", self.index, error)

    def step(self) -> str | None:
        """Step with `action[index]`, auto-resetting on an end; returns an error or None."""
        i, arrays = self.index, self._arrays
        try:
            native = self._native(arrays.action[i])
            obs, reward, terminated, truncated, info = self.env.step(native)
            obs = as_dict(obs)
            bad = _nonfinite(reward, obs)
            if bad is not None:
                # why: never trained on: the step is dropped as a failed one (no reward, a
                # truncation at the last good observation) and the env is reset.
                return self._fail(f"step {self._length + 1} of the episode: non-finite {bad}")
            ended = bool(terminated or truncated)
            # why: the final observation goes to its own rows, so the next episode's first
            # observation can be written to `obs` without losing it.
            self._write(obs, arrays.final_obs if ended else arrays.obs)
        except Exception as exc:
            return self._fail(f"step: {exc!r}")
        self._return += float(reward)
        self._length += 1
        game_over = ended and bool(info.get("game_over", True))
        self.stats = dict(info.get("episode_stats") or {}) if game_over else {}
        arrays.reward[i] = reward
        arrays.terminated[i] = terminated
        arrays.truncated[i] = truncated
        arrays.game_over[i] = game_over
        arrays.episode_return[i] = self._return
        arrays.episode_length[i] = self._length
        self.ended = ended
        if not ended:
            self._write_text(obs, arrays.text)
            return None
        self.final_text = {name: str(obs[name]) for name in arrays.text}
        if game_over:
            self._return, self._length = 0.0, 0
        return self._reset_row()

    def _fail(self, error: str) -> str:
        """Report a failed step as a truncation without reward, then reset the env."""
        i, arrays = self.index, self._arrays
        self.stats = {}
        arrays.reward[i] = 0.0
        arrays.terminated[i] = False
        arrays.truncated[i] = True
        # why: the game did not end on its own; its partial return is not a score to log.
        arrays.game_over[i] = False
        arrays.episode_return[i] = self._return
        arrays.episode_length[i] = self._length
        # why: the last good observation is the final one of the cut episode.
        for name, rows in arrays.obs.items():
            arrays.final_obs[name][i] = rows[i]
        self.final_text = {name: rows[i] for name, rows in arrays.text.items()}
        self.ended = True
        self._return, self._length = 0.0, 0
        reset_error = self._reset_row()
        return error if reset_error is None else f"{error}; {reset_error}"

    def _reset_row(self) -> str | None:
        """Reset the env into row `index`; rebuild it once if reset raises."""
        seed, self._seed = self._seed, None
        try:
            self._write_reset(self.env.reset(seed=seed)[0])
            return None
        except Exception as exc:
            error = f"reset: {exc!r}"
        with contextlib.suppress(Exception):
            self.env.close()
        # why: a second failure propagates: the env cannot be brought back.
        self.env = self._env_fn()
        self._native = native_action(self.env.action_space, self._bounds)
        self._rebuilds += 1
        self._write_reset(self.env.reset(seed=self._rebuild_seed())[0])
        return error

    def _rebuild_seed(self) -> int | None:
        """A rebuilt env's seed: derived from the first seed, so seeded runs stay repeatable."""
        if self._first_seed is None:
            return None
        return int(np.random.SeedSequence([self._first_seed, self._rebuilds]).generate_state(1)[0])

    def _write_reset(self, obs: Any) -> None:
        obs = as_dict(obs)
        self._write(obs, self._arrays.obs)
        self._write_text(obs, self._arrays.text)

    def _write(self, obs: dict[str, Any], rows: dict[str, np.ndarray]) -> None:
        """Row `index` of every array field; a key the batch does not hold is ignored."""
        for name, target in rows.items():
            target[self.index] = obs[name]

    def _write_text(self, obs: dict[str, Any], rows: dict[str, list[str]]) -> None:
        for name, target in rows.items():
            target[self.index] = str(obs[name])

    def close(self) -> None:
        try:
            self.env.close()
        except Exception as exc:
            log.warning("env %d: close raised %r", self.index, exc)
