"""The worker processes of a `VectorEnv`: start, command with timeouts, shut down; and
the `ObsSpec` of the spaces that the envs report.

Every wait here has a timeout, and a worker that dies is noticed at once (its pipe reaches
EOF and its process sentinel becomes ready), so `command()` raises instead of hanging.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import gymnasium as gym
import numpy as np

from gazelle.envs._vector_buffers import Segment, batch_nbytes, create_segment
from gazelle.envs._vector_worker import CMD_CLOSE, CMD_STEP, worker_main
from gazelle.types import FRAME, INSTRUCTION, ObsSpec

_CONTEXTS = ("spawn", "forkserver")


def obs_spec_from_spaces(observation_space: gym.Space, action_space: gym.Space) -> ObsSpec:
    """`ObsSpec` of an env with a Dict (`frame` Box, optional `instruction` Text) or Box
    observation space and a `Discrete(n)` action space."""
    has_instruction = False
    frame_space = observation_space
    if isinstance(observation_space, gym.spaces.Dict):
        frame_space = observation_space[FRAME]
        has_instruction = INSTRUCTION in observation_space.spaces
    if not isinstance(frame_space, gym.spaces.Box):
        raise TypeError(f"frame space must be a Box, got {frame_space}")
    if not isinstance(action_space, gym.spaces.Discrete) or int(action_space.start) != 0:
        raise TypeError(f"action space must be Discrete(n) starting at 0, got {action_space}")
    return ObsSpec(
        frame_shape=tuple(frame_space.shape),
        frame_dtype=np.dtype(frame_space.dtype),
        num_actions=int(action_space.n),
        has_instruction=has_instruction,
    )


def check_seeds(seeds: Iterable[int] | None, num_envs: int) -> list[int | None]:
    """One seed (or None) per env."""
    if seeds is None:
        return [None] * num_envs
    seed_list: list[int | None] = [int(s) for s in seeds]
    if len(seed_list) != num_envs:
        raise ValueError(f"seeds has {len(seed_list)} entries for {num_envs} envs")
    return seed_list


def common_spec(spaces: Sequence[tuple[gym.Space, gym.Space]]) -> ObsSpec:
    """The `ObsSpec` shared by envs with these (observation, action) spaces."""
    specs = {obs_spec_from_spaces(obs, act) for obs, act in spaces}
    if len(specs) != 1:
        raise ValueError(f"envs differ in observation or action spaces: {specs}")
    return specs.pop()


class WorkerPool:
    """Worker processes that each own a contiguous group of the envs of a batch.

    Args:
        env_fns: one picklable env factory per env.
        seeds: seed of each env's first reset.
        num_workers: number of processes; default `min(len(env_fns), os.cpu_count())`.
        context: "spawn" or "forkserver" (never a bare fork: the parent may run torch).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        seeds: Sequence[int | None],
        num_workers: int | None,
        context: str,
    ) -> None:
        if context not in _CONTEXTS:
            raise ValueError(f"context must be one of {_CONTEXTS}, got {context!r}")
        num_envs = len(env_fns)
        if num_workers is None:
            num_workers = min(num_envs, os.cpu_count() or 1)
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be in [1, {num_envs}], got {num_workers}")
        self.groups = [g.tolist() for g in np.array_split(np.arange(num_envs), num_workers)]
        self._env_fns = env_fns
        self._seeds = seeds
        self._ctx = mp.get_context(context)
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._segment: Segment | None = None
        self._closed = False
        #: False while a command is in flight or after one failed: replies may be unread.
        self._in_sync = True

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self, timeout: float) -> list[tuple[gym.Space, gym.Space]]:
        """Start the workers; return (observation_space, action_space) of every env."""
        for w, group in enumerate(self.groups):
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(  # type: ignore[attr-defined]
                target=worker_main,
                args=(
                    child_conn,
                    group,
                    [self._env_fns[i] for i in group],
                    [self._seeds[i] for i in group],
                ),
                name=f"gazelle-env-worker-{w}",
                # why: daemonic, so multiprocessing's exit handler stops any worker left
                # (a non-daemonic one would be joined forever). So env factories cannot
                # start multiprocessing children, and the parent must not be daemonic.
                daemon=True,
            )
            proc.start()
            # why: the parent keeps only its end, so the worker alone holds the other and
            # the parent sees EOF when the worker dies (and vice versa).
            child_conn.close()
            self._procs.append(proc)
            self._conns.append(parent_conn)
        replies = self._gather(list(range(len(self.groups))), timeout, "start", expect="spaces")
        return [spaces for reply in replies for spaces in reply]

    def attach(self, spec: ObsSpec, timeout: float) -> memoryview:
        """Create the shared segment for `spec`, attach every worker; return its buffer."""
        num_envs = sum(len(g) for g in self.groups)
        self._segment = create_segment(batch_nbytes(num_envs, spec.frame_shape, spec.frame_dtype))
        message = (
            "attach",
            self._segment.name,
            num_envs,
            spec.frame_shape,
            spec.frame_dtype.str,
            spec.has_instruction,
        )
        for w in range(len(self.groups)):
            self._send(w, message)
        self._gather(list(range(len(self.groups))), timeout, "attach", expect="ready")
        buffer = self._segment.buf
        assert buffer is not None
        return buffer

    def command(self, cmd: bytes, timeout: float) -> list[Any]:
        """Send `cmd` to every worker; return their reports (None for nothing to report)."""
        if self._closed:
            raise RuntimeError("the VectorEnv is closed")
        if not self._in_sync:
            raise RuntimeError("the VectorEnv is unusable after an earlier failure; close it")
        # why: stays False if anything below raises (KeyboardInterrupt included), since
        # replies may then be left in the pipes and would be read as later answers.
        self._in_sync = False
        workers = list(range(len(self.groups)))
        for w in workers:
            self._send(w, cmd)
        reports = self._gather(workers, timeout, "step" if cmd == CMD_STEP else "reset", "ok")
        self._in_sync = True
        return reports

    def _send(self, w: int, message: Any) -> None:
        try:
            if isinstance(message, bytes):
                self._conns[w].send_bytes(message)
            else:
                self._conns[w].send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError) as exc:
            raise self._dead(w) from exc

    def _gather(self, workers: Sequence[int], timeout: float, what: str, expect: str) -> list[Any]:
        """One reply per worker, in worker order; raises on death, failure or timeout."""
        deadline = time.monotonic() + timeout
        owner: dict[Any, int] = {}
        for w in workers:
            owner[self._conns[w]] = w
            owner[self._procs[w].sentinel] = w
        pending = set(workers)
        replies: dict[int, Any] = {}
        while pending:
            # why: a timed wait on the pipes and the process sentinels: a reply, an EOF or a
            # death wakes it, and a hung env raises after `timeout` instead of blocking.
            ready = wait(
                [obj for obj, w in owner.items() if w in pending],
                timeout=max(deadline - time.monotonic(), 0.0),
            )
            if not ready:
                stuck = sorted(i for w in pending for i in self.groups[w])
                raise RuntimeError(
                    f"env workers did not answer {what} within {timeout:g} s (envs {stuck})"
                )
            for obj in ready:
                w = owner[obj]
                if w not in pending:
                    continue
                conn = self._conns[w]
                try:
                    # why: a worker may have replied just before it died: read that first.
                    if not conn.poll():
                        raise EOFError
                    kind, payload = conn.recv()
                except (EOFError, OSError) as exc:
                    raise self._dead(w) from exc
                if kind == "fatal":
                    raise RuntimeError(
                        f"env worker {w} (envs {self.groups[w]}) failed in {what}:\n{payload}"
                    )
                if kind != expect:
                    raise RuntimeError(f"env worker {w}: expected {expect!r}, got {kind!r}")
                replies[w] = payload
                pending.discard(w)
        return [replies[w] for w in workers]

    def _dead(self, w: int) -> RuntimeError:
        proc = self._procs[w]
        proc.join(timeout=1.0)
        return RuntimeError(
            f"env worker {w} (pid {proc.pid}, envs {self.groups[w]}) died "
            f"(exit code {proc.exitcode})"
        )

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the workers and unlink the segment; idempotent, safe in any state."""
        if self._closed:
            return
        self._closed = True
        try:
            for conn in self._conns:
                with contextlib.suppress(OSError, ValueError):
                    conn.send_bytes(CMD_CLOSE)
            deadline = time.monotonic() + timeout
            for proc in self._procs:
                proc.join(timeout=max(deadline - time.monotonic(), 0.0))
            for proc in self._procs:
                # why: a worker stuck in an env does not read CMD_CLOSE: terminate, then kill.
                if proc.is_alive():
                    proc.terminate()
                    proc.join(timeout=1.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join(timeout=1.0)
            for conn in self._conns:
                conn.close()
        finally:
            if self._segment is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._segment.unlink()
                self._segment.close()
