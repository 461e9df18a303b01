"""One-writer pipes between an actor process and the learner's process, that a dying actor
cannot wedge.

A `multiprocessing.Queue` shared by all actors serialises their writes with a lock held by
a feeder thread in each writer; an actor stopped (SIGSTOP) or killed (SIGKILL) while its
feeder holds that lock blocks every other actor's writes forever: the whole run stalls
(found by `tests/test_reliability.py`, which stops an actor and waits for its replacement).
Here every actor gets its own pipes, created anew for each process it is started as, so:

- there is no lock: one writer per pipe;
- a message is one `write` of at most `MAX_MESSAGE` bytes, which POSIX makes atomic on a
  pipe (`PIPE_BUF` >= 512, 4096 on Linux): a reader never sees half a message, even from a
  writer killed mid-send;
- the writer's end is non-blocking: a message that does not fit (a reader that fell far
  behind) is dropped and counted, never waited for;
- a dead actor's pipes are closed and replaced with its successor's.
"""

from __future__ import annotations

import os
import pickle
import select
from multiprocessing.connection import Connection
from typing import Any

#: Largest message sent, in bytes with its 4-byte length header: the pipe's atomic write
#: size (4096 on Linux, 512 on macOS; POSIX guarantees at least 512).
MAX_MESSAGE = int(getattr(select, "PIPE_BUF", 512))


class Sender:
    """The actor's end: `send(obj)` pickles, checks the size and writes without blocking."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dropped = 0
        self._nonblocking = False

    def send(self, obj: Any) -> bool:
        """Send `obj`; returns False (and counts a drop) when it is too big (see
        `fits`) or the pipe is full or closed."""
        if not self._nonblocking:
            # why: lazily, in the process that writes (the flag lives on the open file).
            os.set_blocking(self.conn.fileno(), False)
            self._nonblocking = True
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) + 4 > MAX_MESSAGE:
            self.dropped += 1
            return False
        try:
            self.conn.send_bytes(data)
        except (BlockingIOError, BrokenPipeError, OSError):
            self.dropped += 1
            return False
        return True


def fits(obj: Any) -> bool:
    """Whether `obj` pickles to a message `Sender.send` can write atomically."""
    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)) + 4 <= MAX_MESSAGE


def receive_all(conn: Connection) -> tuple[list[Any], bool]:
    """Every whole message waiting in `conn` without blocking, and whether the writer is
    gone (end of file: every writer closed, e.g. the actor died)."""
    out: list[Any] = []
    try:
        while conn.poll(0):
            out.append(pickle.loads(conn.recv_bytes()))
    except (EOFError, OSError):
        return out, True
    return out, False
