"""One env of a batch (`EnvSlot`) and the worker process loop of `VectorEnv`.

`EnvSlot` holds the per-env logic shared by `SerialEnvs` (in process) and the workers:
step, auto-reset, episode totals, error recovery, writing row `i` of the batch arrays.

Worker protocol (all messages small; observations go through shared memory):

1. worker -> parent: ``("spaces", [(observation_space, action_space), ...])`` once its envs
   are built, or ``("fatal", text)``.
2. parent -> worker: ``("attach", shm_name, num_envs, frame_shape, frame_dtype,
   has_instruction)``; worker -> parent: ``("ready", None)``.
3. parent -> worker: one command byte per call, ``b"s"`` step (actions already in shared
   memory), ``b"r"`` reset, ``b"c"`` close. Reply to step/reset: ``("ok", report)`` where
   report is None or ``(errors, instructions, final_instructions)``, or ``("fatal", text)``.

This module imports no torch: spawned workers import it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from gazelle.envs._vector_buffers import BatchArrays, Segment, batch_arrays

log = logging.getLogger(__name__)

FRAME = "frame"
INSTRUCTION = "instruction"

CMD_STEP = b"s"
CMD_RESET = b"r"
CMD_CLOSE = b"c"

#: What a worker reports after a step or reset: (errors, instructions, final instructions).
Report = tuple[list[tuple[int, str]], dict[int, str], dict[int, str]]


def split_obs(obs: Any) -> tuple[np.ndarray, str]:
    """`(frame, instruction)` of an env observation (a Dict obs, or a bare Box array)."""
    if isinstance(obs, dict):
        return obs[FRAME], obs.get(INSTRUCTION, "")
    return obs, ""


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
    ) -> None:
        self.index = index
        self.env = env
        self._env_fn = env_fn
        self._seed = seed
        self._first_seed = seed
        self._rebuilds = 0
        self._arrays = arrays
        self._return = 0.0
        self._length = 0
        #: Instruction of the current observation ("" for envs without one).
        self.instruction = ""
        #: Instruction of the final observation when the last step ended an episode.
        self.final_instruction = ""
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
            obs, reward, terminated, truncated, info = self.env.step(int(arrays.action[i]))
            frame, instruction = split_obs(obs)
            ended = bool(terminated or truncated)
            # why: the final observation goes to its own row, so the next episode's first
            # observation can be written to `frame` without losing it.
            (arrays.final_frame if ended else arrays.frame)[i] = frame
        except Exception as exc:
            return self._fail(f"step: {exc!r}")
        self._return += float(reward)
        self._length += 1
        game_over = ended and bool(info.get("game_over", True))
        arrays.reward[i] = reward
        arrays.terminated[i] = terminated
        arrays.truncated[i] = truncated
        arrays.game_over[i] = game_over
        arrays.episode_return[i] = self._return
        arrays.episode_length[i] = self._length
        self.ended = ended
        if not ended:
            self.instruction = instruction
            return None
        self.final_instruction = instruction
        if game_over:
            self._return, self._length = 0.0, 0
        return self._reset_row()

    def _fail(self, error: str) -> str:
        """Report a failed step as a truncation without reward, then reset the env."""
        i, arrays = self.index, self._arrays
        arrays.reward[i] = 0.0
        arrays.terminated[i] = False
        arrays.truncated[i] = True
        # why: the game did not end on its own; its partial return is not a score to log.
        arrays.game_over[i] = False
        arrays.episode_return[i] = self._return
        arrays.episode_length[i] = self._length
        # why: the last good observation is the final one of the cut episode.
        arrays.final_frame[i] = arrays.frame[i]
        self.final_instruction = self.instruction
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
        self._rebuilds += 1
        self._write_reset(self.env.reset(seed=self._rebuild_seed())[0])
        return error

    def _rebuild_seed(self) -> int | None:
        """A rebuilt env's seed: derived from the first seed, so seeded runs stay repeatable."""
        if self._first_seed is None:
            return None
        return int(np.random.SeedSequence([self._first_seed, self._rebuilds]).generate_state(1)[0])

    def _write_reset(self, obs: Any) -> None:
        frame, self.instruction = split_obs(obs)
        self._arrays.frame[self.index] = frame

    def close(self) -> None:
        try:
            self.env.close()
        except Exception as exc:
            log.warning("env %d: close raised %r", self.index, exc)


def worker_main(
    conn: Connection,
    indices: Sequence[int],
    env_fns: Sequence[Callable[[], gym.Env]],
    seeds: Sequence[int | None],
) -> None:
    """Entry point of a worker process that owns the envs `indices` of a batch."""
    # why: Ctrl-C reaches the whole process group; the parent alone decides to shut down,
    # and does so through the pipe (or dies, which closes it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs: list[gym.Env] = []
    slots: list[EnvSlot] = []
    segment: Segment | None = None
    arrays: BatchArrays | None = None
    parent_gone = False
    try:
        try:
            envs = [fn() for fn in env_fns]
        except Exception:
            conn.send(("fatal", traceback.format_exc()))
            return
        conn.send(("spaces", [(env.observation_space, env.action_space) for env in envs]))
        _, shm_name, num_envs, frame_shape, frame_dtype, has_instruction = conn.recv()
        segment = Segment(name=shm_name, create=False)
        arrays = batch_arrays(num_envs, frame_shape, frame_dtype, segment.buf)
        slots = [
            EnvSlot(i, env, fn, seed, arrays)
            for i, env, fn, seed in zip(indices, envs, env_fns, seeds)
        ]
        conn.send(("ready", None))
        _serve(conn, slots, has_instruction)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        # why: the pipe closes only when the parent process is gone (a normal shutdown
        # sends CMD_CLOSE first): exit, and remove the segment it can no longer remove.
        parent_gone = True
    finally:
        for slot in slots:
            slot.close()
        if not slots:
            for env in envs:
                with contextlib.suppress(Exception):
                    env.close()
        if segment is not None:
            if parent_gone:
                with contextlib.suppress(FileNotFoundError):
                    segment.unlink()
            slots.clear()
            arrays = None
            segment.close()


def _serve(conn: Connection, slots: list[EnvSlot], has_instruction: bool) -> None:
    """Answer step/reset commands until CMD_CLOSE."""
    sent_instruction: dict[int, str] = {}
    while True:
        # why: blocks without timeout on purpose: parent death closes the pipe (EOFError).
        cmd = conn.recv_bytes()
        if cmd == CMD_CLOSE:
            return
        errors: list[tuple[int, str]] = []
        final_instructions: dict[int, str] = {}
        try:
            if cmd == CMD_STEP:
                for slot in slots:
                    error = slot.step()
                    if error is not None:
                        errors.append((slot.index, error))
                    if has_instruction and slot.ended:
                        final_instructions[slot.index] = slot.final_instruction
            elif cmd == CMD_RESET:
                sent_instruction.clear()
                for slot in slots:
                    slot.reset()
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except Exception:
            conn.send(("fatal", traceback.format_exc()))
            return
        changed: dict[int, str] = {}
        if has_instruction:
            for slot in slots:
                if sent_instruction.get(slot.index) != slot.instruction:
                    changed[slot.index] = sent_instruction[slot.index] = slot.instruction
        # why: the common step (no error, no new instruction) sends a bare None.
        if errors or changed or final_instructions:
            conn.send(("ok", (errors, changed, final_instructions)))
        else:
            conn.send(("ok", None))
