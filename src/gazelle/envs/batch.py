"""A batch of envs stepped one after the other in this process: `SerialEnvs`.

Every actor steps its envs this way, in its own process; training scales by running more
actor processes, not by giving an actor worker processes (actors are daemonic processes,
which cannot start children)::

    with SerialEnvs([partial(make, "ALE/Pong-v5", seed=s) for s in range(8)]) as envs:
        obs = envs.reset()                  # {"frame": [N, ...], "instruction": [N str], ...}
        out = envs.step(actions)            # BatchStep; ended envs are already reset

An env whose episode ends is reset at once: `obs` then holds the first observation of the
next episode and `final_obs[i]` the last one of the ended episode (to bootstrap a
truncation). `episode_return`/`episode_length` are game totals: they run on across
life-loss ends (`info["game_over"] == False`) and restart after the step where
`game_over` is set. An exception raised by an env is reported in `errors`; that env is
reset (rebuilt from its factory if the reset raises too) and reports `truncated=True`, no
reward and `game_over=False`.

Memory: each array of `obs` (`obs["frame"]`, ...) is a read-only view of a buffer that the
next `step()`/`reset()` overwrites: copy what you keep. All other fields are fresh arrays.
Not thread-safe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from gazelle.envs._batch_slot import BatchArrays, EnvSlot
from gazelle.envs.spaces import obs_spec_of
from gazelle.types import ObsSpec

__all__ = ["BatchStep", "SerialEnvs"]

#: A batched observation: each array field `[N, ...]` (`frame`, ...), each text field `N` str.
BatchObs = dict[str, Any]


class BatchStep(NamedTuple):
    """The result of one step of `N` envs.

    Attributes:
        obs: batched observation after the step; for ended envs, the first observation of
            their next episode. Its arrays are only valid until the next call.
        reward: float32 `[N]`.
        terminated: bool `[N]`, the episode ended in a terminal state.
        truncated: bool `[N]`, the episode was cut (time limit, or an env error).
        game_over: bool `[N]`, a game ended at this step (log its totals).
        episode_return: float32 `[N]`, game return up to and including this step.
        episode_length: int64 `[N]`, game length in agent steps up to this step.
        final_obs: env index -> last observation of the episode that ended at this step.
        errors: `(env index, message)` of envs that raised and were reset.
        episode_stats: env index -> the statistics its env reported for the game that
            ended at this step (`info["episode_stats"]`: ViZDoom's kills, health, ...).
    """

    obs: BatchObs
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    game_over: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    final_obs: dict[int, dict[str, Any]]
    errors: list[tuple[int, str]]
    episode_stats: dict[int, dict[str, float]]


def _spec_of(observation_space: gym.Space, action_space: gym.Space) -> ObsSpec:
    """`ObsSpec` of an env in gazelle's form (`gazelle.envs.spaces.obs_spec_of`); TypeError
    for a space a batch cannot hold."""
    try:
        return obs_spec_of(observation_space, action_space)
    except ValueError as err:
        raise TypeError(str(err)) from err


class SerialEnvs:
    """`N` envs stepped one after the other in this process.

    Args:
        env_fns: one factory per env (called again to rebuild an env whose reset raised).
        seeds: seed of each env's first reset (None: unseeded, or the factory's own seed).
        action_bounds: how Gaussian actions are brought onto a Box's bounds (clip | tanh,
            `gazelle.actions.ActionSpec.env_values`).

    Raises:
        ValueError: no factory, a seed count other than `N`, or envs whose spaces differ.
        TypeError: an observation or action space that a batch cannot hold.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        seeds: Iterable[int] | None = None,
        action_bounds: str = "clip",
    ) -> None:
        if not env_fns:
            raise ValueError("env_fns is empty")
        self.num_envs = len(env_fns)
        seed_list: list[int | None] = [None] * self.num_envs
        if seeds is not None:
            seed_list = [int(s) for s in seeds]
            if len(seed_list) != self.num_envs:
                raise ValueError(f"seeds has {len(seed_list)} entries for {self.num_envs} envs")
        envs = [fn() for fn in env_fns]
        try:
            specs = {_spec_of(e.observation_space, e.action_space) for e in envs}
            if len(specs) != 1:
                raise ValueError(f"envs differ in observation or action spaces: {specs}")
        except Exception:
            for env in envs:
                with contextlib.suppress(Exception):
                    env.close()
            raise
        self.obs_spec: ObsSpec = specs.pop()
        self._arrays = BatchArrays.zeros(self.num_envs, self.obs_spec)
        self._slots = [
            EnvSlot(i, env, fn, seed, self._arrays, action_bounds)
            for i, (env, fn, seed) in enumerate(zip(envs, env_fns, seed_list))
        ]
        # why: callers get read-only views, so they cannot write into the batch's buffers.
        self._views: dict[str, np.ndarray] = {}
        for name, rows in self._arrays.obs.items():
            self._views[name] = rows.view()
            self._views[name].flags.writeable = False
        self._needs_reset = True
        self._closed = False

    def reset(self) -> BatchObs:
        """Reset every env (a new game, totals to 0) and return the batched observation."""
        if self._closed:
            raise RuntimeError("the env batch is closed")
        for slot in self._slots:
            slot.reset()
        self._needs_reset = False
        return self._obs()

    def step(self, actions: np.ndarray) -> BatchStep:
        """Step env `i` with `actions[i]` (`[N, *obs_spec.actions.shape]`: int `[N]` for one
        discrete action set), each env given its native action; see the module docstring.

        Raises:
            RuntimeError: the batch is closed, or `reset()` was never called.
            ValueError: `actions` is not of that shape.
        """
        if self._closed:
            raise RuntimeError("the env batch is closed")
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        shape = (self.num_envs, *self.obs_spec.actions.shape)
        if actions.shape != shape:
            raise ValueError(f"actions must have shape {shape}, got {actions.shape}")
        arrays = self._arrays
        arrays.action[:] = actions
        errors: list[tuple[int, str]] = []
        final_obs: dict[int, dict[str, Any]] = {}
        stats: dict[int, dict[str, float]] = {}
        for slot in self._slots:
            error = slot.step()
            if error is not None:
                errors.append((slot.index, error))
            if slot.ended:
                final: dict[str, Any] = {
                    name: rows[slot.index].copy() for name, rows in arrays.final_obs.items()
                }
                final_obs[slot.index] = {**final, **slot.final_text}
            if slot.stats:
                stats[slot.index] = slot.stats
        return BatchStep(
            obs=self._obs(),
            reward=arrays.reward.copy(),
            terminated=arrays.terminated.copy(),
            truncated=arrays.truncated.copy(),
            game_over=arrays.game_over.copy(),
            episode_return=arrays.episode_return.copy(),
            episode_length=arrays.episode_length.copy(),
            final_obs=final_obs,
            errors=errors,
            episode_stats=stats,
        )

    def _obs(self) -> BatchObs:
        obs: BatchObs = dict(self._views)
        for name, texts in self._arrays.text.items():
            obs[name] = list(texts)
        return obs

    def close(self) -> None:
        """Close every env (idempotent); the batch cannot be stepped afterwards."""
        for slot in self._slots:
            slot.close()
        self._slots = []
        self._closed = True

    def __enter__(self) -> SerialEnvs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
