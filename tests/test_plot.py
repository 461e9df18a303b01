"""gazelle plot: learning curves of real progress.jsonl files (written by RunLogger) to a PNG."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

import gazelle.logging
from gazelle.logging import RunLogger
from gazelle.plot import PlotError, build_figure, plot, read_progress
from gazelle.plot.figure import LEGEND_PX, PANEL_PX, Y_NAMES
from gazelle.plot.runs import SCORE, aggregate

RETURN_LABEL = Y_NAMES["episode_return"]


class FakeClock:
    """Stands in for the ``time`` module inside gazelle.logging: seconds advance by hand."""

    def __init__(self) -> None:
        self.now = 50.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1.7e9 + self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(gazelle.logging, "time", fake)
    return fake


def write_run(
    logdir: Path,
    clock: FakeClock,
    returns: Callable[[int], float] | None = lambda f: f / 1000,
    *,
    levels: tuple[str, ...] = ("CartPole-v1",),
    seed: int = 1,
    learning_rate: float = 0.004,
    config: str | None = "sections",
    score: bool = False,
    rows: int = 20,
    seconds_per_row: float = 3.0,
) -> Path:
    """A run as training leaves it: config.json and RunLogger's progress.jsonl.

    ``config``: "sections" (config.json as gazelle writes it), "flat" (gazelle 0.1's) or
    None (no config.json). Each log interval (5000 frames, ``seconds_per_row`` seconds)
    ends one episode per level with return ``returns(frames) + seed + level index``;
    ``returns=None``: no episode ends.
    """
    with RunLogger(logdir, tensorboard=False, console=False) as logger:
        run = {"seed": seed, "logdir": str(logdir), "total_frames": None}
        values: dict[str, Any] = {  # a few of the fields of each section
            "algo": "impala",
            "env": {"env": levels[0], "num_action_repeats": None},
            "model": {"model": "mlp"},
            "run": run,
            "impala": {"learning_rate": learning_rate, "batch_size": 16},
        }
        if config == "flat":
            sections = [section for section in values.values() if isinstance(section, dict)]
            values = {k: v for section in sections for k, v in section.items()}
        if config is not None:
            (logdir / "config.json").write_text(json.dumps(values, indent=2) + "\n")
        for i in range(rows):
            frames = (i + 1) * 5000
            if returns is not None:
                for index, level in enumerate(levels):
                    logger.episode(level, returns(frames) + seed + index, 200, frames)
            clock.now += seconds_per_row
            extra = {SCORE: frames / 2000, "scores/human_normalized_no_cap": 1.0} if score else {}
            logger.progress(frames, 1000.0, {"losses/total": 1.0 / (i + 1), **extra})
    return logdir


def rows_of(logdir: Path) -> list[dict[str, Any]]:
    lines = (logdir / "progress.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def legend_texts(fig: Figure) -> list[str]:
    (legend,) = fig.legends
    return [text.get_text() for text in legend.get_texts()]


def png_pixels(path: Path) -> np.ndarray:
    """uint8 ``[H, W, 3]`` of a valid PNG file (signature checked, decoded by Pillow)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB"))


def distinct_colours(pixels: np.ndarray) -> int:
    return len(np.unique(pixels.reshape(-1, 3), axis=0))


def test_one_run_draws_return_against_frames_and_wall_time(
    tmp_path: Path, clock: FakeClock
) -> None:
    run = write_run(tmp_path / "cartpole", clock)
    fig = plot([run], tmp_path / "out" / "curve.png")
    pixels = png_pixels(tmp_path / "out" / "curve.png")
    assert pixels.shape == (PANEL_PX[1], 2 * PANEL_PX[0] + LEGEND_PX, 3)
    assert distinct_colours(pixels) > 100  # anti-aliased curves, text, grid: not blank
    assert legend_texts(fig) == ["cartpole"]  # one level: one line, not one per level
    frames_ax, time_ax = fig.axes
    assert [frames_ax.get_xlabel(), time_ax.get_xlabel()] == ["env frames", "wall time (s)"]
    assert frames_ax.get_ylabel() == time_ax.get_ylabel() == RETURN_LABEL
    rows = rows_of(run)
    (line,) = frames_ax.get_lines()
    assert line.get_xdata().tolist() == [row["frames"] for row in rows]
    assert np.allclose(line.get_ydata(), [row["episode_return"] for row in rows])
    (line,) = time_ax.get_lines()
    assert np.allclose(line.get_xdata(), [row["time"] for row in rows])
    assert np.allclose(line.get_xdata(), 3.0 * np.arange(1, 21))  # the clock's seconds


def test_several_runs_get_one_line_each_in_distinct_colours(
    tmp_path: Path, clock: FakeClock
) -> None:
    fast = write_run(tmp_path / "fast", clock, learning_rate=0.01)
    slow = write_run(tmp_path / "slow", clock, lambda f: f / 4000, learning_rate=0.001)
    bare = write_run(tmp_path / "bare", clock, lambda f: -f / 1000, config=None)
    fig = build_figure([fast, slow, bare])
    assert legend_texts(fig) == ["fast", "slow", "bare"]
    for ax in fig.axes:
        lines = ax.get_lines()
        assert len(lines) == 3
        assert len({line.get_color() for line in lines}) == 3
    ys = [line.get_ydata()[-1] for line in fig.axes[0].get_lines()]
    assert ys[0] > ys[1] > 0 > ys[2]


@pytest.mark.parametrize("layout", ["sections", "flat"])
def test_seeds_of_one_config_are_drawn_as_mean_and_min_max_band(
    tmp_path: Path, clock: FakeClock, layout: str
) -> None:
    seeds = [write_run(tmp_path / f"seed{s}", clock, seed=s, config=layout) for s in (1, 2, 3)]
    other = write_run(tmp_path / "other", clock, learning_rate=0.001, config=layout)
    fig = plot([*seeds, other], tmp_path / "seeds.png")
    assert distinct_colours(png_pixels(tmp_path / "seeds.png")) > 100
    assert legend_texts(fig) == ["CartPole-v1 learning_rate=0.004 (3 seeds)", "other"]
    ax = fig.axes[0]
    mean_line, other_line = ax.get_lines()
    returns = np.array([[row["episode_return"] for row in rows_of(s)] for s in seeds])
    assert np.allclose(mean_line.get_ydata(), returns.mean(axis=0))
    assert np.allclose(mean_line.get_ydata(), returns[1])  # seeds are offset by 1
    (band,) = ax.collections  # the lone run has no band
    band_ys = band.get_paths()[0].vertices[:, 1]
    assert np.isclose(band_ys.min(), returns.min()) and np.isclose(band_ys.max(), returns.max())
    assert np.allclose(other_line.get_ydata(), [r["episode_return"] for r in rows_of(other)])


def test_runs_of_the_same_directory_name_are_told_apart_by_their_path(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Kept runs (no config.json) named `seed-1` under two arms get the path parts that
    tell them apart; a name given once stays the bare directory name."""
    runs = [write_run(tmp_path / arm / "seed-1", clock, config=None) for arm in ("a", "b")]
    runs.append(write_run(tmp_path / "c" / "alone", clock, config=None))
    fig = plot(runs, tmp_path / "arms.png")
    assert legend_texts(fig) == ["a/seed-1", "b/seed-1", "alone"]


def test_a_field_an_older_config_lacks_counts_as_unset(tmp_path: Path, clock: FakeClock) -> None:
    """Seeds logged by an older gazelle (no `init` field) and a newer one (`init` unset,
    null) are one config; the env is named from the `env.id` field gazelle writes now."""
    seeds = [write_run(tmp_path / f"seed{s}", clock, seed=s) for s in (1, 2)]
    for path, extra in ((seeds[0], {"init": None}), (seeds[1], {})):
        config = json.loads((path / "config.json").read_text())
        config["env"] = {"id": "Acrobot-v1"}
        config["model"].update(extra)
        (path / "config.json").write_text(json.dumps(config))
    other = write_run(tmp_path / "other", clock, learning_rate=0.001)
    fig = plot([*seeds, other], tmp_path / "old.png")
    first = legend_texts(fig)[0]
    assert first.startswith("Acrobot-v1 ") and first.endswith("(2 seeds)"), legend_texts(fig)


def test_aggregate_interpolates_seeds_on_their_common_span() -> None:
    a = (np.array([0.0, 10.0, 20.0]), np.array([0.0, 10.0, 20.0]))
    b = (np.array([5.0, 15.0, 30.0]), np.array([2.0, 2.0, 2.0]))
    grid, mean, low, high = aggregate([a, b])
    assert grid.tolist() == [5.0, 10.0, 15.0, 20.0]  # no seed extrapolated
    assert np.allclose(mean, [3.5, 6.0, 8.5, 11.0])
    assert low.tolist() == [2.0, 2.0, 2.0, 2.0] and high.tolist() == [5.0, 10.0, 15.0, 20.0]


def test_a_run_with_several_levels_gets_one_line_per_level(
    tmp_path: Path, clock: FakeClock
) -> None:
    levels = ("rooms_watermaze", "explore_goal_locations_small", "lasertag_one_opponent_small")
    run = write_run(tmp_path / "dmlab", clock, levels=levels)
    fig = build_figure([run])
    assert legend_texts(fig) == list(levels)  # the run's name is the legend's title
    assert fig.legends[0].get_title().get_text() == "dmlab"
    rows = rows_of(run)
    for ax in fig.axes:
        lines = ax.get_lines()
        assert len(lines) == 3
        for level, line in zip(levels, lines):
            expected = [row[f"episode_return/{level}"] for row in rows]
            assert np.allclose(line.get_ydata(), expected)
    other = write_run(tmp_path / "cartpole", clock, learning_rate=0.01)
    fig = build_figure([run, other])
    assert legend_texts(fig) == [*(f"dmlab: {level}" for level in levels), "cartpole"]
    assert [len(ax.get_lines()) for ax in fig.axes] == [4, 4]


def test_normalised_score_panel_appears_only_when_rows_have_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    atari = write_run(tmp_path / "pong", clock, levels=("ALE/Pong-v5",), score=True)
    cartpole = write_run(tmp_path / "cartpole", clock, learning_rate=0.01)
    assert len(build_figure([cartpole]).axes) == 2
    fig = plot([atari, cartpole], tmp_path / "score.png")
    assert png_pixels(tmp_path / "score.png").shape == (PANEL_PX[1], 3 * PANEL_PX[0] + LEGEND_PX, 3)
    score_ax = fig.axes[2]
    assert score_ax.get_ylabel() == Y_NAMES[SCORE] and score_ax.get_xlabel() == "env frames"
    (line,) = score_ax.get_lines()  # the CartPole run has no score: no line there
    assert np.allclose(line.get_ydata(), [row[SCORE] for row in rows_of(atari)])


def test_x_and_y_pick_fields_for_one_custom_panel(tmp_path: Path, clock: FakeClock) -> None:
    run = write_run(tmp_path / "r", clock, seconds_per_row=600.0)
    fig = build_figure([run], y="losses/total")
    (ax,) = fig.axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("env frames", "losses/total")
    assert np.allclose(ax.get_lines()[0].get_ydata(), 1.0 / np.arange(1, 21))
    (ax,) = build_figure([run], x="time").axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("wall time (h)", RETURN_LABEL)
    assert np.allclose(ax.get_lines()[0].get_xdata(), np.arange(1, 21) / 6)  # 10 min a row


def test_a_run_without_returns_yet_gets_a_one_line_message(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    from gazelle.cli import main

    fresh = write_run(tmp_path / "fresh", clock, None)
    assert rows_of(fresh)[0]["episode_return"] is None  # as RunLogger writes it
    with pytest.raises(PlotError, match=r"no episode returns yet in .*fresh"):
        build_figure([fresh])
    assert main(["plot", str(fresh), "--out", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no episode returns yet" in err and "Traceback" not in err
    assert not (tmp_path / "x.png").exists()
    done = write_run(tmp_path / "done", clock, learning_rate=0.01)  # one with returns is drawn
    assert legend_texts(build_figure([done, fresh])) == ["done", "fresh: no episode returns yet"]


def test_missing_logdir_or_progress_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gazelle.cli import main

    with pytest.raises(FileNotFoundError, match=r"no run directory .*nowhere"):
        build_figure([tmp_path / "nowhere"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no progress\.jsonl in .*empty"):
        build_figure([tmp_path / "empty"])
    for name in ("nowhere", "empty"):
        with pytest.raises(SystemExit) as exit_info:
            main(["plot", str(tmp_path / name)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and name in err and "Traceback" not in err


def test_cli_writes_the_png_and_rejects_unknown_formats(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    from gazelle.cli import main

    run = write_run(tmp_path / "r", clock)
    out = tmp_path / "plots" / "curve.png"
    assert main(["plot", str(run), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert distinct_colours(png_pixels(out)) > 100
    with pytest.raises(SystemExit) as exit_info:  # a bad flag value: exit code 2, as all
        main(["plot", str(run), "--out", str(tmp_path / "curve.xyz")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "cannot write .xyz" in err and err.count("\n") == 1


def test_read_progress_skips_nulls_torn_rows_and_sorts(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "progress.jsonl").write_text(
        '{"frames": 20, "episode_return": 2.0}\n'
        '{"frames": 10, "episode_return": 1.0}\n'
        '{"frames": 30, "episode_return": null}\n'
        '{"frames": 40}\n'
        '{"frames": 50, "episo'
    )
    xs, ys = read_progress(run, "frames", "episode_return")
    assert xs.tolist() == [10.0, 20.0] and ys.tolist() == [1.0, 2.0]
    xs, _ = read_progress(run / "progress.jsonl", "frames", "episode_return")
    assert xs.tolist() == [10.0, 20.0]


def test_a_kept_run_is_read_from_its_gzipped_progress(tmp_path: Path) -> None:
    import gzip

    run = tmp_path / "seed-1"  # as benchmarks/keep_runs.py keeps it in benchmarks/results
    run.mkdir()
    rows = b'{"frames": 10, "episode_return": 1.0}\n{"frames": 20, "episode_return": 2.0}\n'
    (run / "progress.jsonl.gz").write_bytes(gzip.compress(rows))
    xs, ys = read_progress(run, "frames", "episode_return")
    assert xs.tolist() == [10.0, 20.0] and ys.tolist() == [1.0, 2.0]
    xs, _ = read_progress(run / "progress.jsonl.gz", "frames", "episode_return")
    assert xs.tolist() == [10.0, 20.0]
