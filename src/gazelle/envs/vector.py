"""Batches of envs: `SerialEnvs` (in process) and `VectorEnv` (worker processes).

Both step `N` envs with one call and share one API::

    with VectorEnv([partial(make, "ALE/Pong-v5")] * 8, seeds=range(8)) as envs:
        obs = envs.reset()                  # {"frame": [N, ...], "instruction": [N str]}
        out = envs.step(actions)            # BatchStep; ended envs are already reset

An env whose episode ends is reset at once: `obs` then holds the first observation of the
next episode and `final_obs[i]` the last one of the ended episode (to bootstrap a
truncation). `episode_return`/`episode_length` are game totals: they run on across
life-loss ends (`info["game_over"] == False`) and restart after the step where
`game_over` is set. An exception raised by an env is reported in `errors`; that env is
reset and reports `truncated=True`, no reward and `game_over=False`.

Memory: `obs["frame"]` is a read-only view of a buffer that the next `step()`/`reset()`
overwrites (in `VectorEnv`, shared memory written by the workers): copy what you keep.
All other fields are fresh arrays. Neither class is thread-safe.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

import gymnasium as gym
import numpy as np

from gazelle.envs._vector_buffers import SHM_PREFIX, BatchArrays, batch_arrays
from gazelle.envs._vector_pool import WorkerPool, check_seeds, common_spec, obs_spec_from_spaces
from gazelle.envs._vector_worker import CMD_RESET, CMD_STEP, EnvSlot
from gazelle.types import FRAME, INSTRUCTION, ObsSpec

__all__ = ["SHM_PREFIX", "BatchStep", "SerialEnvs", "VectorEnv", "obs_spec_from_spaces"]

#: A batched observation: `frame` `[N, ...]`, and `instruction` (`N` str) if the task has one.
BatchObs = dict[str, Any]

_Batch = TypeVar("_Batch", bound="_EnvBatch")


class BatchStep(NamedTuple):
    """The result of one step of `N` envs.

    Attributes:
        obs: batched observation after the step; for ended envs, the first observation of
            their next episode. `obs["frame"]` is only valid until the next call.
        reward: float32 `[N]`.
        terminated: bool `[N]`, the episode ended in a terminal state.
        truncated: bool `[N]`, the episode was cut (time limit, or an env error).
        game_over: bool `[N]`, a game ended at this step (log its totals).
        episode_return: float32 `[N]`, game return up to and including this step.
        episode_length: int64 `[N]`, game length in agent steps up to this step.
        final_obs: env index -> last observation of the episode that ended at this step.
        errors: `(env index, message)` of envs that raised and were reset.
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


class _EnvBatch:
    """What both batch types share: the arrays, batching of observations and results."""

    num_envs: int
    obs_spec: ObsSpec
    _arrays: BatchArrays
    _instructions: list[str]

    def _init_arrays(self, arrays: BatchArrays) -> None:
        self._arrays = arrays
        self._instructions = [""] * self.num_envs
        self._frames = arrays.frame.view()
        self._frames.flags.writeable = False
        self._needs_reset = True
        self._closed = False

    def _obs(self) -> BatchObs:
        obs: BatchObs = {FRAME: self._frames}
        if self.obs_spec.has_instruction:
            obs[INSTRUCTION] = list(self._instructions)
        return obs

    def _set_actions(self, actions: np.ndarray) -> None:
        if self._closed:
            raise RuntimeError("the env batch is closed")
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), got {actions.shape}")
        self._arrays.action[:] = actions

    def _result(
        self, errors: list[tuple[int, str]], final_instructions: dict[int, str]
    ) -> BatchStep:
        arrays = self._arrays
        final_obs: dict[int, dict[str, Any]] = {}
        for i in np.flatnonzero(arrays.terminated | arrays.truncated).tolist():
            final_obs[i] = {FRAME: arrays.final_frame[i].copy()}
            if self.obs_spec.has_instruction:
                final_obs[i][INSTRUCTION] = final_instructions.get(i, "")
        return BatchStep(
            obs=self._obs(),
            reward=arrays.reward.copy(),
            terminated=arrays.terminated.copy(),
            truncated=arrays.truncated.copy(),
            game_over=arrays.game_over.copy(),
            episode_return=arrays.episode_return.copy(),
            episode_length=arrays.episode_length.copy(),
            final_obs=final_obs,
            errors=sorted(errors),
        )

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Batch) -> _Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SerialEnvs(_EnvBatch):
    """`N` envs stepped one after the other in this process (same API as `VectorEnv`).

    Args:
        env_fns: one factory per env.
        seeds: seed of each env's first reset (None: unseeded).
    """

    def __init__(
        self, env_fns: Sequence[Callable[[], gym.Env]], seeds: Iterable[int] | None = None
    ) -> None:
        if not env_fns:
            raise ValueError("env_fns is empty")
        self.num_envs = len(env_fns)
        seed_list = check_seeds(seeds, self.num_envs)
        envs = [fn() for fn in env_fns]
        try:
            self.obs_spec = common_spec([(e.observation_space, e.action_space) for e in envs])
        except Exception:
            for env in envs:
                env.close()
            raise
        self._init_arrays(
            batch_arrays(self.num_envs, self.obs_spec.frame_shape, self.obs_spec.frame_dtype)
        )
        self._slots = [
            EnvSlot(i, env, fn, seed, self._arrays)
            for i, (env, fn, seed) in enumerate(zip(envs, env_fns, seed_list))
        ]

    def reset(self) -> BatchObs:
        """Reset every env (a new game, totals to 0) and return the batched observation."""
        if self._closed:
            raise RuntimeError("the env batch is closed")
        for slot in self._slots:
            slot.reset()
            self._instructions[slot.index] = slot.instruction
        self._needs_reset = False
        return self._obs()

    def step(self, actions: np.ndarray) -> BatchStep:
        """Step env `i` with `actions[i]` (int64 `[N]`); see the module docstring."""
        self._set_actions(actions)
        errors: list[tuple[int, str]] = []
        final_instructions: dict[int, str] = {}
        for slot in self._slots:
            error = slot.step()
            if error is not None:
                errors.append((slot.index, error))
            if slot.ended:
                final_instructions[slot.index] = slot.final_instruction
            self._instructions[slot.index] = slot.instruction
        return self._result(errors, final_instructions)

    def close(self) -> None:
        """Close every env (idempotent)."""
        for slot in self._slots:
            slot.close()
        self._slots = []
        self._closed = True


class VectorEnv(_EnvBatch):
    """`N` envs stepped in parallel by worker processes, observations in shared memory.

    Worker `w` owns a contiguous group of envs and steps them one after the other; the
    parent writes the actions to shared memory, sends one byte per worker, and waits for
    every worker's (usually empty) reply, with a timeout. Workers ignore SIGINT and exit
    when the parent closes the batch or dies (their pipe reaches EOF). The segment
    (`/dev/shm/gzvec_<parent pid>_*`) is unlinked by `close()`, when the object is
    collected, at interpreter exit (also after a KeyboardInterrupt), by a worker that sees
    its parent die, and by multiprocessing's resource tracker once parent and workers are
    gone. It leaks only if all of them are SIGKILLed at once (`kill -9` of the group).

    Args:
        env_fns: one picklable factory per env (e.g. `functools.partial` of a module-level
            function): they are called in the workers.
        num_workers: worker processes; default `min(N, os.cpu_count())`.
        context: multiprocessing start method, "spawn" (default) or "forkserver".
        seeds: seed of each env's first reset (None: unseeded).
        timeout: seconds to wait for the workers in `step()`/`reset()` before raising.
        start_timeout: seconds to wait for the workers to build their envs.

    Raises (from any call): `RuntimeError` naming the env indices of a worker that died,
    failed beyond recovery, or did not answer in time; the batch is unusable afterwards,
    and `close()` still cleans up.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        context: str = "spawn",
        seeds: Iterable[int] | None = None,
        timeout: float = 120.0,
        start_timeout: float = 300.0,
    ) -> None:
        if not env_fns:
            raise ValueError("env_fns is empty")
        self.num_envs = len(env_fns)
        self._timeout = timeout
        self._pool = WorkerPool(env_fns, check_seeds(seeds, self.num_envs), num_workers, context)
        # why: the workers and the segment are released even without close(): when this
        # object is collected, or at interpreter exit (also after a KeyboardInterrupt).
        self._finalizer = weakref.finalize(self, self._pool.shutdown)
        try:
            self.obs_spec = common_spec(self._pool.start(start_timeout))
            buffer = self._pool.attach(self.obs_spec, start_timeout)
        except BaseException:
            self._pool.shutdown()
            raise
        self._init_arrays(
            batch_arrays(
                self.num_envs, self.obs_spec.frame_shape, self.obs_spec.frame_dtype, buffer
            )
        )

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (for supervision and tests)."""
        return self._pool.pids

    def reset(self) -> BatchObs:
        """Reset every env (a new game, totals to 0) and return the batched observation."""
        self._apply(self._pool.command(CMD_RESET, self._timeout))
        self._needs_reset = False
        return self._obs()

    def step(self, actions: np.ndarray) -> BatchStep:
        """Step env `i` with `actions[i]` (int64 `[N]`); see the module docstring."""
        self._set_actions(actions)
        # why: the pipe round trip that follows orders this write before the workers' reads.
        errors, final_instructions = self._apply(self._pool.command(CMD_STEP, self._timeout))
        return self._result(errors, final_instructions)

    def _apply(self, reports: list[Any]) -> tuple[list[tuple[int, str]], dict[int, str]]:
        """Merge the workers' reports; new instructions go into the batched observation."""
        errors: list[tuple[int, str]] = []
        final_instructions: dict[int, str] = {}
        for report in reports:
            if report is None:
                continue
            worker_errors, instructions, finals = report
            errors.extend(worker_errors)
            final_instructions.update(finals)
            for i, text in instructions.items():
                self._instructions[i] = text
        return errors, final_instructions

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers (killing those that do not exit within `timeout` s) and free
        the shared memory. Idempotent."""
        self._pool.shutdown(timeout)
        self._finalizer.detach()
        self._closed = True
