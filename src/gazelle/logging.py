"""Run logging: TensorBoard scalars, a JSONL progress file, the console, timings, and any
further sink of the progress rows (Weights & Biases: `gazelle.tracking`).

Metric names are used verbatim and are the caller's to keep stable and namespaced
(``losses/total``, ``charts/fps``, ``timing/env``). Episode returns follow the IMPALA seed:
``{level}/episode_return`` and ``{level}/episode_frames``, plus ``charts/episode_return``.
Tensors are ``.item()``-ed here, once, when logged: keep calls off the hot path.
"""

from __future__ import annotations

import collections
import json
import logging as std_logging  # why: this module shadows the name inside the package only
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import torch

from gazelle.console import (
    LineConsole,
    Progress,
    ProgressDisplay,
    format_count,
    format_duration,
    format_line,
)
from gazelle.timings import Timings

__all__ = ["RowSink", "RunLogger", "Timings", "format_count", "format_duration"]

_log = std_logging.getLogger("gazelle")

#: Episodes kept per level (and overall) for ``recent_return``.
RETURN_WINDOW = 100
PROGRESS_FILE = "progress.jsonl"


class RowSink(Protocol):
    """Somewhere else each progress row goes (a tracking service)."""

    def log_row(self, row: Mapping[str, Any]) -> None:
        """Record one row of ``progress.jsonl`` (``frames`` is its step)."""
        ...

    def close(self) -> None:
        """Flush and finish."""
        ...


def _to_float(value: float | int | torch.Tensor | np.generic) -> float:
    """A Python float from a number, numpy scalar or one-element tensor (synchronises)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().item())
    return float(value)


def _json_number(value: float) -> float | None:
    """``value``, or None when it is NaN or infinite (not valid JSON)."""
    return value if math.isfinite(value) else None


class RunLogger:
    """Logs one training run to ``logdir``: TensorBoard events, ``progress.jsonl``, console.

    Args:
        logdir: directory of the run; created if missing.
        total_frames: the run's frame budget, for the console's share and time left.
        tensorboard: write TensorBoard event files (``scalars``/``histogram``/``episode``).
        console: the display ``console_line`` feeds (`gazelle.console.make_console`), True
            for plain lines on ``stream`` (`LineConsole`), False for none.
        console_interval_s: with ``console=True``: minimum seconds between lines when the
            stream is not a TTY (a log file); on a TTY the line is rewritten in place.
        stream: with ``console=True``: where the lines go (default: `sys.stdout`).
        sinks: where each progress row also goes (`gazelle.tracking.WandbSink`); closed
            with the logger.
        resume_frames: when resuming from a checkpoint taken at this many frames: TensorBoard
            events logged after it by the earlier run are purged, rows of ``progress.jsonl``
            with more frames are dropped, and ``time`` continues from the last row kept.
    """

    def __init__(
        self,
        logdir: str | Path,
        *,
        total_frames: int | None = None,
        tensorboard: bool = True,
        console: bool | ProgressDisplay = True,
        console_interval_s: float = 5.0,
        stream: IO[str] | None = None,
        resume_frames: int | None = None,
        sinks: Sequence[RowSink] = (),
        max_seconds: float | None = None,
    ) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.total_frames = total_frames
        if console is True:
            console = LineConsole(stream, interval_s=console_interval_s)
        self._console = None if isinstance(console, bool) else console
        self._sinks = list(sinks)
        self._start = time.monotonic()
        # why: --max-seconds counts from this invocation's start (not the resumed run's)
        self._deadline = None if max_seconds is None else self._start + max_seconds
        self._time_offset = 0.0
        self._returns: collections.deque[float] = collections.deque(maxlen=RETURN_WINDOW)
        self._level_returns: dict[str, collections.deque[float]] = {}
        self.progress_path = self.logdir / PROGRESS_FILE
        if resume_frames is not None:
            self._time_offset = self._truncate_progress(resume_frames)
        self._writer: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # slow import: only if used

            # why: purge_step makes TensorBoard drop the earlier run's events logged after
            # the checkpoint, so the resumed curves do not double back.
            purge = None if resume_frames is None else resume_frames + 1
            self._writer = SummaryWriter(str(self.logdir), purge_step=purge, flush_secs=30)
        # Append mode: a resumed run continues the same file (binary, to read its last byte).
        self._progress = open(self.progress_path, "ab+")  # noqa: SIM115
        end = self._progress.seek(0, os.SEEK_END)
        self._progress.seek(max(end - 1, 0))  # writes still go to the end ("a" mode)
        if end and self._progress.read(1) != b"\n":
            self._progress.write(b"\n")  # why: a row torn by a crash must not swallow ours

    def scalars(self, metrics: Mapping[str, float | torch.Tensor], frames: int) -> None:
        """Write each metric as a TensorBoard scalar at ``step=frames``; names verbatim."""
        if self._writer is not None:
            for name, value in metrics.items():
                self._writer.add_scalar(name, _to_float(value), global_step=frames)

    def histogram(self, tag: str, values: np.ndarray | torch.Tensor, frames: int) -> None:
        """Write a TensorBoard histogram of ``values`` (any shape) at ``step=frames``."""
        flat = torch.as_tensor(values).detach().cpu().reshape(-1)
        if self._writer is not None and flat.numel():  # an empty one is an error in TensorBoard
            self._writer.add_histogram(tag, flat, global_step=frames)

    def episode(self, level: str, episode_return: float, episode_frames: int, frames: int) -> None:
        """Record a finished episode of ``level`` (TensorBoard, and the recent-return window).

        Args:
            level: level or task name (the TensorBoard tag prefix).
            episode_return: the episode's undiscounted return.
            episode_frames: its length in environment frames (steps * action repeats).
            frames: the run's frame count now (the TensorBoard step).
        """
        episode_return = _to_float(episode_return)
        self._returns.append(episode_return)
        window = self._level_returns.setdefault(level, collections.deque(maxlen=RETURN_WINDOW))
        window.append(episode_return)
        _log.debug("Level: %s Episode return: %f", level, episode_return)
        if self._writer is not None:
            self._writer.add_scalar(f"{level}/episode_return", episode_return, frames)
            self._writer.add_scalar(f"{level}/episode_frames", episode_frames, frames)
            self._writer.add_scalar("charts/episode_return", episode_return, frames)

    def recent_return(self, level: str | None = None) -> float | None:
        """Mean return of the last ``RETURN_WINDOW`` episodes (of ``level``); None if none."""
        window = self._returns if level is None else self._level_returns.get(level)
        return float(np.mean(window)) if window else None

    def reached(self, target: float | None) -> bool:
        """The last ``RETURN_WINDOW`` episodes (a full window) have a mean of `target` or more
        (False without a target)."""
        window = self._returns
        return (
            target is not None and len(window) == RETURN_WINDOW and bool(np.mean(window) >= target)
        )

    def level_returns(self) -> dict[str, list[float]]:
        """The recent returns of every level seen so far (a copy), oldest first."""
        return {level: list(window) for level, window in self._level_returns.items()}

    def returns_state(self) -> dict[str, list[float]]:
        """The recent-return windows, for a checkpoint: all levels under "", then each level."""
        return {"": list(self._returns), **self.level_returns()}

    def load_returns_state(self, state: dict[str, list[float]]) -> None:
        """Refill the windows from `returns_state()`'s output, so that a resumed run's recent
        return continues the old one (an empty window would show the first episodes to end,
        the shortest ones: on Pong the lost ones)."""
        self._returns.clear()
        self._returns.extend(float(r) for r in state.get("", []))
        for level, values in state.items():
            if level:
                window = collections.deque((float(r) for r in values), maxlen=RETURN_WINDOW)
                self._level_returns[level] = window

    def elapsed(self) -> float:
        """Seconds of training so far (including those before a resume)."""
        return self._time_offset + time.monotonic() - self._start

    def progress(
        self, frames: int, fps: float, extra: Mapping[str, float | torch.Tensor] | None = None
    ) -> dict[str, Any]:
        """Append one row to ``progress.jsonl`` and flush it; returns the row.

        The row has ``frames``, ``fps``, ``time`` (seconds of training), ``wall_time``
        (Unix time), ``episode_return`` (recent mean, None before the first episode),
        ``episode_window`` (the episodes that mean is over: up to ``RETURN_WINDOW``),
        ``episode_return/<level>`` per level, then ``extra``. NaN/inf are written as null.
        """
        row: dict[str, Any] = {
            "frames": int(frames),
            "fps": _json_number(float(fps)),
            "time": round(self.elapsed(), 3),
            "wall_time": round(time.time(), 3),
            "episode_return": self.recent_return(),
            "episode_window": len(self._returns),
        }
        for level in self._level_returns:
            row[f"episode_return/{level}"] = self.recent_return(level)
        for name, value in (extra or {}).items():
            row[name] = _json_number(_to_float(value))
        try:
            self._progress.write(json.dumps(row, allow_nan=False).encode() + b"\n")
            self._progress.flush()
        except OSError as err:
            if err.errno is not None and err.filename is None:
                err.filename = str(self.progress_path)  # why: a failed write names no file
            raise
        for sink in self._sinks:
            sink.log_row(row)
        return row

    def _truncate_progress(self, resume_frames: int) -> float:
        """Drop rows after ``resume_frames`` (atomically); returns the last kept ``time``."""
        if not self.progress_path.exists():
            return 0.0
        kept: list[str] = []
        last_time = 0.0
        for line in self.progress_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a crash
            if row.get("frames", 0) <= resume_frames:
                kept.append(line)
                last_time = float(row.get("time") or 0.0)
        tmp = self.progress_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.progress_path)
        return last_time

    def snapshot(
        self,
        frames: int,
        fps: float,
        *,
        policy_lag: float | None = None,
        actor_restarts: int | None = None,
    ) -> Progress:
        """Where the run stands (`gazelle.console.Progress`), for the console."""
        return Progress(
            frames=int(frames),
            fps=float(fps),
            elapsed_s=self.elapsed(),
            total_frames=self.total_frames,
            recent_return=self.recent_return(),
            level_returns={level: self.recent_return(level) for level in self._level_returns},
            policy_lag=policy_lag,
            actor_restarts=actor_restarts,
            seconds_to_deadline=(
                None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)
            ),
        )

    def format_line(self, frames: int, fps: float) -> str:
        """The plain console line: frames, frames/s, recent return, elapsed, time left."""
        return format_line(self.snapshot(frames, fps))

    def console_line(
        self,
        frames: int,
        fps: float,
        *,
        force: bool = False,
        policy_lag: float | None = None,
        actor_restarts: int | None = None,
    ) -> bool:
        """Show the progress on the console; returns whether anything was shown.

        With plain lines: on a TTY the line is rewritten in place on every call; otherwise
        a full line is written at most every ``console_interval_s`` (or when ``force``).
        """
        if self._console is None:
            return False
        progress = self.snapshot(frames, fps, policy_lag=policy_lag, actor_restarts=actor_restarts)
        return self._console.update(progress, force=force)

    def flush(self) -> None:
        """Flush TensorBoard events and the progress file."""
        if self._writer is not None:
            self._writer.flush()
        self._progress.flush()

    def close(self) -> None:
        """Flush and close the writers and sinks; leave the console's last state shown."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if not self._progress.closed:
            self._progress.close()
        if self._console is not None:
            self._console.close()
            self._console = None
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            sink.close()

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
