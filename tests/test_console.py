"""The live console: plain lines when stdout is not a terminal (real `gazelle train` runs,
IMPALA and A3C), `--quiet`, and the rich display rendered into a fake terminal."""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from gazelle.console import (
    LineConsole,
    Progress,
    RichConsole,
    format_line,
    make_console,
    render,
)
from gazelle.logging import RunLogger

#: A plain progress line of a run with a budget (IMPALA: with the policy lag).
LINE = re.compile(
    r"^frames [\d.]+[KM]?/[\d.]+[KM]? \(\d+%\) \| [\d,]+ fps \| return (-|-?[\d.]+) \| "
    r"elapsed \d+:\d\d:\d\d \| left (\?|\d+:\d\d:\d\d)( \| lag \d+\.\d\d)? \| restarts \d+$"
)
#: 2 actors x 2 envs, B=4, T=10: a CartPole run of a few seconds.
SMALL_FLAGS = ["--num-actors", "2", "--envs-per-actor", "2", "--log-interval-s", "0.5"]


def _train(logdir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`gazelle train` on CartPole with its stdout a pipe (not a terminal)."""
    command = [sys.executable, "-m", "gazelle.cli", "train", "--logdir", str(logdir)]
    proc = subprocess.run(
        [*command, *SMALL_FLAGS, *flags],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _progress_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("frames ")]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.slow
def test_plain_lines_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    proc = _train(tmp_path, "--batch-size", "4", "--unroll-length", "10", "--total-frames", "4000")
    out = proc.stdout
    assert "\r" not in out and "\x1b" not in out  # no in-place rewrite, no rich escapes
    lines = _progress_lines(out)
    # the first interval's line (nothing written before it) and the final one, at least
    assert len(lines) >= 2, out
    for line in lines:
        assert LINE.match(line), line
        assert " | lag " in line  # IMPALA has a policy lag
    assert lines[-1].startswith("frames 4.0K/4.0K (100%)") and "left 0:00:00" in lines[-1]
    assert "restarts 0" in lines[-1]
    assert "done: 4,000 frames" in out
    assert not (tmp_path / "wandb").exists()  # W&B only when asked


@pytest.mark.slow
def test_a3c_routes_its_lines_through_the_console(tmp_path: Path) -> None:
    proc = _train(tmp_path, "--algo", "a3c", "--envs-per-actor", "1", "--total-frames", "3000")
    lines = _progress_lines(proc.stdout)
    assert len(lines) >= 2, proc.stdout
    for line in lines:
        assert LINE.match(line), line
        assert " | lag " not in line  # A3C has no policy lag to show
    # (the workers may overshoot the budget by a rollout or two)
    assert re.match(r"frames 3\.\dK/3\.0K \(100%\)", lines[-1]), lines[-1]


@pytest.mark.slow
def test_quiet_keeps_only_the_final_summary(tmp_path: Path) -> None:
    proc = _train(
        tmp_path, "--quiet", "--batch-size", "4", "--unroll-length", "10", "--total-frames", "4000"
    )
    lines = _progress_lines(proc.stdout)
    assert len(lines) == 1 and lines[0].startswith("frames 4.0K/4.0K (100%)"), proc.stdout
    assert "gazelle: impala on CartPole-v1" in proc.stdout  # what runs is still said
    assert "done: 4,000 frames" in proc.stdout
    # the progress rows are written as without --quiet
    assert len((tmp_path / "progress.jsonl").read_text().splitlines()) >= 2


def test_quiet_console_writes_forced_lines_only() -> None:
    stream = _Tty()  # quiet: even on a terminal, whole lines and no live display
    console = make_console(quiet=True, stream=stream)
    progress = Progress(frames=10, fps=5.0, elapsed_s=2.0, total_frames=100)
    assert isinstance(console, LineConsole)
    assert not console.update(progress)
    assert stream.getvalue() == ""
    assert console.update(progress, force=True)
    console.close()
    assert stream.getvalue() == format_line(progress) + "\n"


def test_make_console_is_rich_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    assert isinstance(make_console(stream=_Tty()), RichConsole)
    assert isinstance(make_console(stream=io.StringIO()), LineConsole)
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(make_console(stream=_Tty()), LineConsole)


def test_rich_display_in_a_fake_terminal(tmp_path: Path) -> None:
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=100, color_system=None)
    logger = RunLogger(
        tmp_path, total_frames=1_000_000, tensorboard=False, console=RichConsole(terminal)
    )
    logger.episode("PongNoFrameskip-v4", 12.5, 1000, frames=10)
    logger.episode("BreakoutNoFrameskip-v4", 30.0, 1000, frames=10)
    assert logger.console_line(100_000, 500.0, policy_lag=0.25, actor_restarts=0)
    assert logger.console_line(250_000, 1234.0, policy_lag=1.5, actor_restarts=2)
    logger.close()
    text = screen.getvalue()
    assert "\x1b[1A" in text  # redrawn in place, not appended
    last = text[text.rindex("frames 250.0K") - 60 :]  # the last frame drawn
    assert "25.0%" in last and "frames 250.0K / 1.0M" in last
    assert "fps 1,234" in last
    # (1,000,000 - 250,000) / 1234 frames/s = 607.8 s left; the clocks stop at close
    assert "left 0:10:07" in last and "elapsed 0:00:0" in last
    assert "policy lag 1.50" in last and "actor restarts 2" in last
    assert re.search(r"PongNoFrameskip-v4\s+12\.50", last)
    assert re.search(r"BreakoutNoFrameskip-v4\s+30\.00", last)
    assert re.search(r"all levels\s+21\.25", last)


def test_rich_clocks_move_between_updates() -> None:
    progress = Progress(frames=500, fps=10.0, elapsed_s=100.0, total_frames=1000)
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100, color_system=None)
    terminal.print(render(progress, moved_s=65.0))
    text = terminal.file.getvalue()  # type: ignore[attr-defined]
    # 100 s + 65 s elapsed; 500 frames / 10 fps = 50 s left, less 65 s: none
    assert "elapsed 0:02:45" in text and "left 0:00:00" in text
    assert "50.0%" in text and "(no episode yet)" in text


def test_plain_line_fields() -> None:
    progress = Progress(
        frames=1_500,
        fps=0.0,
        elapsed_s=61.0,
        total_frames=3_000,
        recent_return=2.0,
        level_returns={"a": 1.0, "b": None},
        policy_lag=math.nan,  # no update yet: not shown
        actor_restarts=1,
    )
    assert progress.time_left() == math.inf
    assert format_line(progress) == (
        "frames 1.5K/3.0K (50%) | 0 fps | return 2.00 (a 1.00, b -) | elapsed 0:01:01 | "
        "left ? | restarts 1"
    )
    no_budget = Progress(frames=7, fps=1.0, elapsed_s=0.0)
    assert no_budget.fraction is None and no_budget.time_left() is None
    assert format_line(no_budget) == "frames 7 | 1 fps | return - | elapsed 0:00:00"


def test_time_left_ends_at_max_seconds_when_that_comes_first() -> None:
    # a bench-like run: a huge frame budget, cut by --max-seconds
    huge = Progress(frames=1_000, fps=100.0, elapsed_s=10.0, total_frames=10**12,
                    seconds_to_deadline=30.0)  # fmt: skip
    assert huge.time_left() == 30.0
    assert "left 0:00:30" in format_line(huge)
    near = Progress(frames=900, fps=100.0, elapsed_s=10.0, total_frames=1_000,
                    seconds_to_deadline=30.0)  # fmt: skip
    assert near.time_left() == 1.0  # the frame budget ends first
    no_budget = Progress(frames=7, fps=1.0, elapsed_s=0.0, seconds_to_deadline=5.0)
    assert no_budget.time_left() == 5.0


def test_the_run_logger_counts_max_seconds_from_its_own_start(tmp_path: Path) -> None:
    from gazelle.logging import RunLogger

    logger = RunLogger(tmp_path, total_frames=10**12, console=False, tensorboard=False,
                       max_seconds=3600.0)  # fmt: skip
    left = logger.snapshot(100, 10.0).time_left()
    assert left is not None and 3590.0 < left <= 3600.0
    logger.close()
