"""Why a run stops before its budget, said in one line, and the loops' guards around it.

Every algorithm's loop uses these, so a fault reads the same whatever the algorithm:

- `RunStopped`: the run cannot go on (a fleet or parameter server that failed, too many
  non-finite updates in a row, a full disk). `str(err)` is one line; the loop has written a
  final checkpoint first, or said in one line why it could not. `gazelle train` prints it
  and exits 1, without a traceback.
- `NonFiniteCount`: `--max-nonfinite-updates`, counted on any stream of updates (IMPALA's
  learner steps, A3C's workers' pushes).
- `stop_on_os_error`: an `OSError` (ENOSPC writing progress.jsonl or a checkpoint) becomes a
  `RunStopped` naming the path and the error; `stop_on_failure`: any error of a part the run
  needs (a fleet, a parameter server, whatever the backend raises) becomes one naming it.
- `warn_on_error`: the steps of a loop's `finally` (final save, last progress row) warn in
  one line instead of raising a second error over the first.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gazelle.errors import RunError


class RunStopped(RunError):
    """The run cannot go on; `str()` is one line saying why (the cause is chained). A
    `gazelle.errors.RunError` raised by a part below the loop (a backend's) is one too."""


class NonFiniteError(RunStopped):
    """Too many updates in a row had a non-finite loss or gradient."""


def warn(line: str) -> None:
    """A warning of a run's loop or worker (`StallWatch`, `MemoryCheck`): printed as the
    run's other warnings are (`report_nonfinite`), on stdout, on a line of its own (a TTY's
    progress line is rewritten in place and has no newline yet), flushed now."""
    print(f"\n{line}", flush=True)


def one_line(err: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters."""
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}"[:300]


def os_error_message(err: OSError) -> str:
    """`<path>: <strerror> (<ERRNO>)`, or without the path when the error has none."""
    what = err.strerror or str(err) or type(err).__name__
    where = f"{err.filename}: " if err.filename else ""
    if err.errno is None:
        return f"{where}{what}"
    return f"{where}{what} ({errno.errorcode.get(err.errno, str(err.errno))})"


@contextlib.contextmanager
def stop_on_os_error(what: str = "the run") -> Iterator[None]:
    """An `OSError` inside (a full disk under progress.jsonl or a checkpoint) becomes a
    `RunStopped` naming the path and the error; other exceptions pass unchanged."""
    try:
        yield
    except TimeoutError:
        raise  # why: an OSError by class, but a loop's own "no data for N s", not I/O
    except OSError as err:
        full = err.errno in (errno.ENOSPC, errno.EDQUOT)
        raise RunStopped(
            f"an I/O error stopped {what}: {os_error_message(err)}; "
            f"{'free some space' if full else 'fix its cause'}, then re-run the same command "
            "to resume from the last checkpoint"
        ) from err


@contextlib.contextmanager
def stop_on_failure(what: str) -> Iterator[None]:
    """Any exception inside (a dead process, a lost connection, a backend's own error type
    such as Ray's) becomes a `RunStopped`: `<what> failed: <Type>: <first line>`. A
    `RunStopped` passes unchanged; the cause stays chained for a traceback in Python."""
    try:
        yield
    except RunError:
        raise  # already one line saying what failed (a RunStopped, or a backend's RunError)
    except Exception as err:
        raise RunStopped(f"{what} failed: {one_line(err)}; the run stops") from err


def warn_on_error(what: str, step: Callable[[], Any], then: str = "") -> bool:
    """Run `step`; on an exception print one warning line naming `what` (and `then`, what
    follows from it) and return False.

    why: the steps of a `finally` run while an error may already be on its way out (a full
    disk); a second exception from them would replace it and print a second traceback.
    """
    try:
        step()
    except Exception as err:
        reason = os_error_message(err) if isinstance(err, OSError) else one_line(err)
        print(f"\ngazelle: warning: {what} failed: {reason}{then}")
        return False
    return True


def final_save(path: Path, save: Callable[[], Any]) -> bool:
    """The save in a loop's `finally`: never raises (see `warn_on_error`); the checkpoint
    already at `path`, if any, stays (saves are atomic)."""
    return warn_on_error(
        "the final checkpoint", save, f"; {path} keeps the last one written, if any"
    )


class NonFiniteCount:
    """Updates skipped for a non-finite loss or gradient: in all and in a row; the run stops
    after `limit` in a row (`--max-nonfinite-updates`).

    IMPALA's learner keeps its own counts (`Learner.skipped`, `skipped_in_a_row`) and calls
    `report` with them; A3C's loop counts its workers' update events with `record`.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self.in_a_row = 0

    def record(self, skipped: bool, frames: int) -> None:
        """Count one update (in the order they arrived); raises `NonFiniteError` at the
        limit."""
        if not skipped:
            self.in_a_row = 0
            return
        self.total += 1
        self.in_a_row += 1
        report_nonfinite(self.in_a_row, self.total, self.limit, frames)


def report_nonfinite(in_a_row: int, total: int, limit: int, frames: int) -> None:
    """Say that an update was skipped; raise `NonFiniteError` once `in_a_row` reaches
    `limit`."""
    print(
        f"\ngazelle: warning: non-finite loss or gradient at {frames:,} frames; update "
        f"skipped ({in_a_row} in a row, {total} in all), weights and optimiser state "
        "unchanged"
    )
    if in_a_row >= limit:
        raise NonFiniteError(
            f"{in_a_row} updates in a row had a non-finite loss or gradient "
            f"(--max-nonfinite-updates {limit}); stopping. The checkpoint keeps the last good "
            "weights; try a lower --learning-rate, --grad-norm-clip, or check the env's "
            "rewards and observations"
        )
