"""One live run per logdir: a lock file that a second run on the same directory finds taken.

Two runs on one logdir (a requeued job, a typo) would overwrite each other's checkpoints and
interleave progress.jsonl. A run takes `<logdir>/.gazelle.lock` with `flock` before any
process starts (`gazelle.algorithms.preflight.check_logdir`) and writes its pid there; a
second run finds the lock held and stops with one line naming that pid. The kernel drops
the lock when its holder dies, however it dies (`kill -9` included), so the lock file of a
killed run is taken over by the next run (with a line saying so); a run that ends well
empties the file. The lock is this process's: a second run in the same process on the same
logdir (a resume from Python) takes it again.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gazelle.config import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, as before
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".gazelle.lock"

#: Resolved logdir -> the descriptor that holds its lock, in this process.
_HELD: dict[Path, int] = {}


def acquire(logdir: str | Path) -> None:
    """Take `logdir`'s lock for this process (again, if it holds it already).

    Raises ConfigError on `--logdir` (one line naming the other run's pid) when another
    live process holds it."""
    key = Path(logdir).resolve()
    if key in _HELD or fcntl is None:
        return
    fd = os.open(key / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        other = _read_pid(fd)
        os.close(fd)
        who = f"pid {other}" if other else "another process"
        raise ConfigError(
            "logdir",
            str(logdir),
            f"a directory no live run uses: stop that run first, or pass another --logdir (if "
            f"{who} is not training, remove {key / LOCK_FILE})",
            problem=f"another run is training in {logdir} ({who}, as {LOCK_FILE} says)",
        ) from None
    previous = _read_pid(fd)
    if previous and previous != os.getpid():
        print(
            f"gazelle: taking over the lock of a run that ended without releasing it (pid "
            f"{previous}, killed?) in {logdir}"
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = fd


def release(logdir: str | Path) -> None:
    """Give `logdir`'s lock back (its file emptied: no run holds it); a no-op if this
    process does not hold it."""
    fd = _HELD.pop(Path(logdir).resolve(), None)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)  # why: closing the descriptor drops the flock


def _read_pid(fd: int) -> int | None:
    """The pid a lock file holds (None when empty or unreadable)."""
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
