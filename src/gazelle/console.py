"""The live console of a training run: one progress display, fed a `Progress` snapshot at
every log interval.

- `LineConsole`: plain lines (``frames 1.2M/10.0M (12%) | 2,000 fps | return 12.50 |
  elapsed 0:10:17 | left 1:13:02 | lag 1.30 | restarts 0``), at most one per interval; on
  a TTY stream the one line is rewritten in place.
- `RichConsole`: a live display drawn by rich (a progress bar, frames/s, time left, policy
  lag, actor restarts, a table of the recent return per level), for a terminal.
- `make_console`: rich on a terminal, plain lines otherwise; ``quiet`` keeps only the
  forced final line.

Warnings and errors are not the console's: they are printed as they always were, and under
a rich display they appear above it (rich redirects stdout and stderr while it is live).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

__all__ = [
    "LineConsole",
    "Progress",
    "ProgressDisplay",
    "RichConsole",
    "format_count",
    "format_duration",
    "format_line",
    "make_console",
]

#: Per-level returns in a plain line up to this many levels (a table shows them all).
MAX_LEVELS_INLINE = 6


def format_count(n: float) -> str:
    """Human-readable count: ``950``, ``12.3K``, ``1.2M``, ``4.0G``."""
    for threshold, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= threshold:
            return f"{n / threshold:.1f}{suffix}"
    return f"{n:.0f}"


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` (with a ``Nd`` prefix beyond a day); ``?`` when unknown or infinite."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{days}d {clock}" if days else clock


def _return(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@dataclass(frozen=True)
class Progress:
    """Where a run stands, as the console shows it.

    `level_returns` maps each level with finished episodes to its recent mean return;
    `policy_lag` (mean learner updates between acting and learning) and `actor_restarts`
    are None where the algorithm has no such number; `seconds_to_deadline`: what is left of
    `--max-seconds`, None without it.
    """

    frames: int
    fps: float
    elapsed_s: float
    total_frames: int | None = None
    recent_return: float | None = None
    level_returns: Mapping[str, float | None] = field(default_factory=dict)
    policy_lag: float | None = None
    actor_restarts: int | None = None
    seconds_to_deadline: float | None = None

    @property
    def fraction(self) -> float | None:
        """Share of the frame budget done, in [0, 1]; None without a budget."""
        if not self.total_frames:
            return None
        return min(max(self.frames / self.total_frames, 0.0), 1.0)

    def time_left(self) -> float | None:
        """Seconds to the end of the run: of the frame budget at the current frames/s (inf
        at 0 frames/s) or of `--max-seconds`, whichever comes first."""
        if not self.total_frames and self.seconds_to_deadline is None:
            return None
        left = math.inf
        if self.total_frames:
            left = (self.total_frames - self.frames) / self.fps if self.fps > 0 else math.inf
        if self.seconds_to_deadline is not None:
            left = min(left, self.seconds_to_deadline)
        return max(left, 0.0)


def format_line(progress: Progress) -> str:
    """The plain console line: frames (and share of the budget), frames/s, recent return
    (per level for a few levels), elapsed, time left, policy lag, actor restarts."""
    p = progress
    frames = f"frames {format_count(p.frames)}"
    if p.total_frames and p.fraction is not None:
        frames += f"/{format_count(p.total_frames)} ({100 * p.fraction:.0f}%)"
    parts = [frames, f"{p.fps:,.0f} fps", "return " + _return(p.recent_return)]
    if 1 < len(p.level_returns) <= MAX_LEVELS_INLINE:
        levels = ", ".join(f"{name} {_return(v)}" for name, v in p.level_returns.items())
        parts[-1] += f" ({levels})"
    parts.append(f"elapsed {format_duration(p.elapsed_s)}")
    left = p.time_left()
    if left is not None:
        parts.append(f"left {format_duration(left)}")
    if p.policy_lag is not None and math.isfinite(p.policy_lag):
        parts.append(f"lag {p.policy_lag:.2f}")
    if p.actor_restarts is not None:
        parts.append(f"restarts {p.actor_restarts}")
    return " | ".join(parts)


class ProgressDisplay(Protocol):
    """What a run's logger shows its progress on."""

    def update(self, progress: Progress, *, force: bool = False) -> bool:
        """Show `progress` (a display may skip it unless `force`); whether it was shown."""
        ...

    def close(self) -> None:
        """Leave the terminal as a later print expects it (the last state stays shown)."""
        ...


class LineConsole:
    """Plain lines on `stream` (default: `sys.stdout` at construction).

    Not a TTY: a full line at most every `interval_s` (or when forced). A TTY: the line is
    rewritten in place (carriage return) at every update. `quiet`: forced lines only,
    written whole.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, interval_s: float = 5.0, quiet: bool = False
    ) -> None:
        # why: looked up now, not bound at import, so a redirected stdout is honoured.
        self._stream = stream if stream is not None else sys.stdout
        self._in_place = bool(getattr(self._stream, "isatty", lambda: False)()) and not quiet
        self._interval_s = interval_s
        self._quiet = quiet
        self._last = -math.inf
        self._line_open = False  # an in-place line without its newline yet
        self._width = 0

    def update(self, progress: Progress, *, force: bool = False) -> bool:
        now = time.monotonic()
        if self._quiet and not force:
            return False
        if not (self._in_place or force or now - self._last >= self._interval_s):
            return False
        self._last = now
        line = format_line(progress)
        if self._in_place:
            padding = " " * max(self._width - len(line), 0)  # erase a longer old line
            self._stream.write("\r" + line + padding)
            self._width, self._line_open = len(line), True
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
        return True

    def close(self) -> None:
        if self._line_open:
            self._stream.write("\n")
            self._stream.flush()
            self._line_open = False


class RichConsole:
    """A live rich display on `console` (default: a rich console on stdout).

    Started at the first update; between updates it redraws about once a second, so
    elapsed and time left keep moving. `close` draws the last state and leaves it shown.
    """

    def __init__(self, console: Any = None, *, refresh_per_second: float = 1.0) -> None:
        from rich.console import Console

        self._console = console if console is not None else Console()
        self._refresh_per_second = refresh_per_second
        self._view = _LiveView()
        self._live: Any = None

    def update(self, progress: Progress, *, force: bool = False) -> bool:
        from rich.live import Live

        self._view.show(progress)
        if self._live is None:
            self._live = Live(
                self._view,
                console=self._console,
                refresh_per_second=self._refresh_per_second,
            )
            self._live.start(refresh=True)
        else:
            self._live.refresh()
        return True

    def close(self) -> None:
        if self._live is not None:
            self._view.frozen = True  # why: the last frame shows the run's end, not a clock
            self._live.stop()
            self._live = None


class _LiveView:
    """The renderable a rich `Live` redraws: the last `Progress`, its clocks moved on by
    the seconds since it came (unless `frozen`)."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.since = time.monotonic()
        self.frozen = False

    def show(self, progress: Progress) -> None:
        self.progress, self.since = progress, time.monotonic()

    def __rich__(self) -> Any:
        if self.progress is None:
            return ""
        moved = 0.0 if self.frozen else time.monotonic() - self.since
        return render(self.progress, moved)


def render(progress: Progress, moved_s: float = 0.0) -> Any:
    """The rich display of `progress`, its clocks moved on by `moved_s` seconds: a bar with
    the share of the budget and the frames, one line of rates and counts, and a table of
    the recent return per level (and over all levels when there are several)."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    p, fraction = progress, progress.fraction
    head = Table.grid(padding=(0, 1))
    frames = format_count(p.frames)
    if p.total_frames:
        frames += f" / {format_count(p.total_frames)}"
    head.add_row(
        # why: with no budget there is no share to fill; rich pulses a bar of total None.
        ProgressBar(total=None if fraction is None else 1.0, completed=fraction or 0.0, width=40),
        Text("" if fraction is None else f"{100 * fraction:5.1f}%", style="bold"),
        Text(f"frames {frames}"),
    )
    stats = [("fps", f"{p.fps:,.0f}"), ("elapsed", format_duration(p.elapsed_s + moved_s))]
    left = p.time_left()
    if left is not None:
        stats.append(("left", format_duration(max(left - moved_s, 0.0))))
    if p.policy_lag is not None and math.isfinite(p.policy_lag):
        stats.append(("policy lag", f"{p.policy_lag:.2f}"))
    if p.actor_restarts is not None:
        stats.append(("actor restarts", str(p.actor_restarts)))
    line = Text("   ").join(Text.assemble((f"{k} ", "dim"), (v, "bold")) for k, v in stats)
    returns = Table(box=None, padding=(0, 2), pad_edge=False)
    returns.add_column("level", style="cyan")
    returns.add_column("recent return", justify="right")
    for level, value in p.level_returns.items():
        returns.add_row(level, _return(value))
    if not p.level_returns:
        returns.add_row("(no episode yet)", "-")
    elif len(p.level_returns) > 1:
        # why: the last episodes of any level, not a mean of the levels' means.
        returns.add_row("all levels", _return(p.recent_return), style="bold")
    return Group(head, line, returns)


def make_console(
    *, quiet: bool = False, stream: IO[str] | None = None, interval_s: float = 5.0
) -> ProgressDisplay:
    """The display for a run: rich on a terminal, plain lines otherwise (a file, a pipe,
    CI); with `quiet`, only the final (forced) line."""
    stream = stream if stream is not None else sys.stdout
    if not quiet and bool(getattr(stream, "isatty", lambda: False)()):
        from rich.console import Console

        console = Console(file=stream)
        if console.is_terminal and not console.is_dumb_terminal:
            return RichConsole(console)
    return LineConsole(stream, interval_s=interval_s, quiet=quiet)
