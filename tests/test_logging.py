"""RunLogger (TensorBoard events read back, progress.jsonl, console line) and Timings."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gazelle.logging import RunLogger, Timings, format_count, format_duration


def _events(logdir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def _scalar_steps(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stdlib_logging_is_not_shadowed() -> None:
    import gazelle.logging as glog

    assert glog.std_logging.getLogger is not None
    assert Path(glog.std_logging.__file__).parent.name == "logging"
    assert "gazelle" not in glog.std_logging.__file__


def test_scalars_and_histogram_are_written_at_frame_steps(tmp_path: Path) -> None:
    with RunLogger(tmp_path, console=False) as log:
        log.scalars({"losses/total": torch.tensor(1.5), "charts/fps": 300}, frames=100)
        log.scalars({"losses/total": 0.25}, frames=200)
        log.histogram("charts/action", torch.tensor([0, 1, 1, 3]), frames=200)
        log.histogram("charts/empty", np.zeros(0), frames=200)  # ignored, not an error
    acc = _events(tmp_path)
    assert set(acc.Tags()["scalars"]) == {"losses/total", "charts/fps"}
    assert _scalar_steps(acc, "losses/total") == [(100, 1.5), (200, 0.25)]
    assert _scalar_steps(acc, "charts/fps") == [(100, 300.0)]
    assert acc.Tags()["histograms"] == ["charts/action"]
    (hist,) = acc.Histograms("charts/action")
    assert hist.step == 200
    assert hist.histogram_value.num == 4
    assert hist.histogram_value.sum == 5
    assert (hist.histogram_value.min, hist.histogram_value.max) == (0, 3)


def test_episode_tags_and_recent_returns(tmp_path: Path) -> None:
    with RunLogger(tmp_path, console=False) as log:
        assert log.recent_return() is None
        log.episode("pong", 3.0, 400, frames=1000)
        log.episode("breakout", 10.0, 800, frames=2000)
        log.episode("pong", 5.0, 600, frames=3000)
        assert log.recent_return() == pytest.approx(6.0)
        assert log.recent_return("pong") == pytest.approx(4.0)
        assert log.recent_return("breakout") == pytest.approx(10.0)
        assert log.recent_return("missing") is None
        assert log.level_returns() == {"pong": [3.0, 5.0], "breakout": [10.0]}
        for i in range(150):  # the window keeps the last 100 only
            log.episode("pong", float(i), 10, frames=4000 + i)
        assert log.recent_return("pong") == pytest.approx(np.mean(np.arange(50, 150)))
    acc = _events(tmp_path)
    assert _scalar_steps(acc, "pong/episode_return")[:2] == [(1000, 3.0), (3000, 5.0)]
    assert _scalar_steps(acc, "pong/episode_frames")[:2] == [(1000, 400.0), (3000, 600.0)]
    assert _scalar_steps(acc, "breakout/episode_return") == [(2000, 10.0)]
    assert _scalar_steps(acc, "charts/episode_return")[:3] == [
        (1000, 3.0),
        (2000, 10.0),
        (3000, 5.0),
    ]


def test_progress_rows_and_append_on_reopen(tmp_path: Path) -> None:
    with RunLogger(tmp_path, tensorboard=False, console=False) as log:
        first = log.progress(0, 0.0, {"losses/total": torch.tensor(2.0)})
        log.episode("pong", -21.0, 100, frames=50)
        log.episode("boxing", 4.0, 100, frames=60)
        log.progress(100, 123.4, {"losses/total": 1.0, "losses/bad": float("nan")})
    assert first["episode_return"] is None
    assert not list(tmp_path.glob("events.out.tfevents.*"))  # tensorboard=False
    with RunLogger(tmp_path, tensorboard=False, console=False) as log:
        log.progress(200, 150.0)
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [r["frames"] for r in rows] == [0, 100, 200]
    assert rows[0]["episode_return"] is None and rows[0]["losses/total"] == 2.0
    assert rows[1]["fps"] == 123.4
    assert rows[1]["episode_return"] == pytest.approx(-8.5)
    assert rows[1]["episode_return/pong"] == -21.0
    assert rows[1]["episode_return/boxing"] == 4.0
    assert rows[1]["losses/bad"] is None  # NaN is written as null: the file stays JSON
    assert all(r["time"] >= 0 and "wall_time" in r for r in rows)


def test_progress_rows_are_flushed_before_close(tmp_path: Path) -> None:
    log = RunLogger(tmp_path, tensorboard=False, console=False)
    log.progress(10, 1.0)
    assert json.loads((tmp_path / "progress.jsonl").read_text())["frames"] == 10
    log.close()


def test_resume_drops_later_rows_and_purges_later_events(tmp_path: Path) -> None:
    with RunLogger(tmp_path, console=False) as log:
        for frames in (10, 20, 30):
            log.scalars({"losses/total": float(frames)}, frames)
            log.progress(frames, 1.0)
    with (tmp_path / "progress.jsonl").open("a") as f:
        f.write('{"frames": 40, "ti')  # a row torn by a crash
    # why: TensorBoard orders event files by name: <unix seconds>.<host>.<pid>.<counter>.
    # Two writers in one second of one process sort by the counter as text ("10" < "9"),
    # which a real resume (a new process, later) never hits.
    time.sleep(1.1)
    with RunLogger(tmp_path, console=False, resume_frames=20) as log:
        assert (
            log.elapsed()
            >= json.loads((tmp_path / "progress.jsonl").read_text().splitlines()[-1])["time"]
        )
        log.scalars({"losses/total": -1.0}, 30)
        log.progress(30, 2.0)
    frames = [
        json.loads(r)["frames"] for r in (tmp_path / "progress.jsonl").read_text().splitlines()
    ]
    assert frames == [10, 20, 30]
    assert _scalar_steps(_events(tmp_path), "losses/total") == [(10, 10.0), (20, 20.0), (30, -1.0)]


def test_console_line_plain_stream_is_rate_limited(tmp_path: Path) -> None:
    stream = io.StringIO()
    log = RunLogger(
        tmp_path, total_frames=10_000_000, tensorboard=False, stream=stream, console_interval_s=60
    )
    log.episode("pong", 12.5, 100, frames=10)
    assert log.console_line(1_234_567, 2000.0)
    assert not log.console_line(1_300_000, 2000.0)  # within the interval: skipped
    assert log.console_line(1_300_000, 2000.0, force=True)
    log.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    assert "frames 1.2M/10.0M" in lines[0]
    assert "2,000 fps" in lines[0]
    assert "return 12.50" in lines[0]
    assert "elapsed 0:00:0" in lines[0]
    # (10M - 1,234,567) / 2000 fps = 4382.7 s
    assert "left 1:13:02" in lines[0]
    assert stream.getvalue().endswith("\n")


def test_console_line_tty_rewrites_in_place_and_close_ends_line(tmp_path: Path) -> None:
    stream = _Tty()
    log = RunLogger(tmp_path, tensorboard=False, stream=stream, console_interval_s=60)
    assert log.console_line(999, 10.0)
    assert log.console_line(5_000_000, 0.0)  # TTY: no rate limit
    assert not stream.getvalue().endswith("\n")
    log.close()
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    first, second = text.strip("\n").split("\r")[1:]
    assert "frames 999 |" in first and "return -" in first and "left" not in first
    assert "frames 5.0M" in second and "0 fps" in second


def test_console_disabled_writes_nothing(tmp_path: Path) -> None:
    stream = io.StringIO()
    with RunLogger(tmp_path, tensorboard=False, console=False, stream=stream) as log:
        assert not log.console_line(1, 1.0, force=True)
    assert stream.getvalue() == ""


def test_format_helpers() -> None:
    assert [format_count(n) for n in (0, 999, 1234, 1_234_567, 4e9)] == [
        "0",
        "999",
        "1.2K",
        "1.2M",
        "4.0G",
    ]
    assert format_duration(3725) == "1:02:05"
    assert format_duration(90061) == "1d 1:01:01"
    assert format_duration(float("inf")) == "?"


def test_timings_means_and_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([1.0, 1.5, 2.0, 2.25])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    timings = Timings()
    with timings.time("env"):
        pass
    with timings.time("env"):
        pass
    timings.add("learner", 3.0)
    assert timings.means() == {"timing/env": pytest.approx(0.375), "timing/learner": 3.0}
    assert timings.counts() == {"env": 2, "learner": 1}
    timings.reset()
    assert timings.means() == {}


def test_timings_records_even_when_the_body_raises() -> None:
    timings = Timings()
    with pytest.raises(KeyError), timings.time("queue"):
        raise KeyError("x")
    assert timings.counts() == {"queue": 1}


def test_row_torn_by_a_crash_does_not_swallow_the_next(tmp_path: Path) -> None:
    (tmp_path / "progress.jsonl").write_text('{"frames": 10}\n{"frames": 2')
    with RunLogger(tmp_path, tensorboard=False, console=False) as log:
        log.progress(30, 1.0)
    lines = (tmp_path / "progress.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["frames"] == 30 and len(lines) == 3
