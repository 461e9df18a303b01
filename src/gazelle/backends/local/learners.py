"""Learners 1..N-1 of a run with `--learners N` on this machine: spawned processes joined
with the trainer's process (rank 0) in a torch.distributed group whose rendezvous and
sockets listen on 127.0.0.1 only (`gazelle.backends.collective`, docs/distributed.md)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from typing import Any

import torch
import torch.multiprocessing as mp

from gazelle import registrations
from gazelle.backends import LearnerRequest
from gazelle.backends.collective import (
    READY_KEY,
    LearnerLost,
    ProcessGroupCollective,
    client_store,
    learner_lost,
    listen,
    loopback_interface,
    process_state,
    serve_store,
    start_timeout,
    wait_for_keys,
)
from gazelle.backends.local.child import child_main, join_unless_stopped, kill_group
from gazelle.runtime.interfaces import Work

#: The one address a one-machine run's learners listen on.
LOOPBACK = "127.0.0.1"
#: `prctl` option: set the calling thread's name, the process's in `ps` (linux/prctl.h).
PR_SET_NAME = 15


def name_process(name: str) -> None:
    """Show this process as `name` in `ps`, `top` and `/proc/<pid>/comm` (Linux; at most 15
    bytes), so a user (or a test) can tell learner r from the actors."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def rank_device(device: torch.device, rank: int) -> torch.device:
    """Rank `rank`'s device: the CPU, or the `rank`-th GPU after rank 0's (NCCL needs one
    GPU per learner); ValueError naming --learners where there are too few."""
    if device.type != "cuda":
        return device
    count = torch.cuda.device_count()
    first = device.index or 0
    if first + rank >= count:
        raise ValueError(
            f"--learners: learner {rank} needs a GPU of its own (cuda:{first + rank}); this "
            f"machine has {count} (cuda:0..{count - 1}); allowed: at most {count - first}"
        )
    return torch.device("cuda", first + rank)


def learner_main(
    rank: int, size: int, port: int, timeout_s: float, device: torch.device,
    work: Work, settings: Any, parent_pid: int,
) -> None:  # fmt: skip
    """A learner process: join rank 0's group, then `work(collective, settings)`."""
    name_process(f"gazelle-learn{rank}")
    store = client_store(LOOPBACK, port, size, start_timeout(timeout_s))
    store.set(READY_KEY.format(rank), "1")

    def check() -> None:
        # why: the kernel kills this process when the trainer goes (`child_main`), but a
        # re-parented orphan must also stop waiting for messages that will never come.
        if os.getppid() != parent_pid:
            raise LearnerLost(f"learner 0 (pid {parent_pid}) is gone; learner {rank} stops")

    collective = ProcessGroupCollective(
        store, rank, size, device, timeout_s, check, loopback_interface()
    )
    try:
        work(collective, settings)
    finally:
        collective.close()


class LocalLearners:
    """Ranks 1..N-1 as spawned processes, and this process as rank 0 (`Learners`)."""

    def __init__(self, request: LearnerRequest) -> None:
        size, self.timeout_s = request.size, request.timeout_s
        devices = [rank_device(request.device, rank) for rank in range(size)]
        server = listen(LOOPBACK)
        port = server.getsockname()[1]
        store = serve_store(server, size, start_timeout(request.timeout_s))
        ctx = mp.get_context("spawn")
        self.processes: list[Any] = []
        for rank in range(1, size):
            args = (rank, size, port, request.timeout_s, devices[rank], request.work,
                    request.settings, os.getpid())  # fmt: skip
            process = ctx.Process(
                target=child_main,
                args=(registrations.capture(), learner_main, args, os.getpid()),
                name=f"gazelle-learner-{rank}",
                daemon=True,
            )
            process.start()
            self.processes.append(process)
        try:
            # why: the group's forming blocks; first see every learner up (a learner that
            # fails to start ends the wait at once, with its exit, instead of the timeout).
            keys = [READY_KEY.format(rank) for rank in range(1, size)]
            wait_for_keys(store, keys, start_timeout(request.timeout_s), self.check)
            self.collective = ProcessGroupCollective(
                store, 0, size, devices[0], request.timeout_s, self.check, loopback_interface()
            )
        except BaseException:
            self._kill()
            raise

    def _dead(self) -> list[str]:
        """`learner r (pid p) exited with ...` for each learner process that has ended."""
        lines = []
        for rank, process in enumerate(self.processes, start=1):
            code = process.exitcode
            if code is None:
                continue
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
            lines.append(f"learner {rank} (pid {process.pid}) {how}")
        return lines

    def _stopped(self) -> list[str]:
        """`learner r (pid p) is stopped` for each learner stopped by a signal (SIGSTOP)."""
        return [
            f"learner {rank} (pid {process.pid}) is stopped"
            for rank, process in enumerate(self.processes, start=1)
            if process_state(process.pid) in ("T", "t")
        ]

    def check(self) -> None:
        dead = self._dead()
        if dead:
            raise LearnerLost(f"{'; '.join(dead)}; the run stops")

    def lost(self, err: BaseException) -> LearnerLost | None:
        return learner_lost(err, self._dead, self._stopped, self.timeout_s, 1.0)

    def close(self, timeout: float = 10.0) -> None:
        with contextlib.suppress(Exception):
            self.collective.post(None)  # why: the learners leave their wait and exit
        deadline = time.monotonic() + timeout
        for process in self.processes:
            join_unless_stopped(process, deadline)
        self._kill()
        self.collective.close()

    def _kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                kill_group(process.pid)
            process.join(1.0)


def build_learners(request: LearnerRequest) -> LocalLearners:
    """`gazelle.backends.build_learners` on this machine."""
    return LocalLearners(request)
