"""benchmarks/time_to_score.py: when a seed first reaches the threshold (window full, minutes
from launch), the summary over seeds, and one real run stopped at its threshold."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "time_to_score", ROOT / "benchmarks" / "time_to_score.py"
)
tts = importlib.util.module_from_spec(spec)
sys.modules["time_to_score"] = tts
spec.loader.exec_module(tts)


def row(frames, value, window, wall):
    return {"frames": frames, "episode_return": value, "episode_window": window, "wall_time": wall}


def test_the_first_row_over_the_threshold_with_a_full_window_counts():
    rows = [
        row(100, None, 0, 1060.0),
        row(200, 19.0, 40, 1120.0),  # over, but the mean spans 40 episodes only
        row(300, 17.9, 100, 1180.0),
        row(400, 18.0, 100, 1240.0),  # the first
        row(500, 20.0, 100, 1300.0),
    ]
    assert tts.first_at(rows, 18.0, 100, launched=1000.0) == {"frames": 400, "minutes": 4.0}
    assert tts.first_at(rows, 21.0, 100, launched=1000.0) is None


def write_seed(out, seed, rows, launched=1000.0, speeds=None):
    logdir = out / f"seed-{seed}"
    logdir.mkdir(parents=True)
    command = ["gazelle", "train", "--seed", str(seed), "--logdir", str(logdir)]
    launch = {"launched": launched, "command": command}
    if speeds is not None:
        launch.update(speed_before=speeds[0], speed_after=speeds[1])
    (logdir / "launch.json").write_text(json.dumps(launch))
    (logdir / "progress.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_the_summary_gives_the_median_min_and_max_over_seeds(tmp_path):
    write_seed(tmp_path, 1, [row(10, 5.0, 100, 1060.0), row(20, 10.0, 100, 1120.0)])
    write_seed(tmp_path, 2, [row(10, 10.0, 100, 1300.0)])
    write_seed(tmp_path, 3, [row(10, 1.0, 100, 1060.0), row(30, 12.0, 100, 1600.0)])
    args = tts.argparse.Namespace(threshold=10.0, window=100)
    summary = tts.summarise(tmp_path, args)
    assert summary["reached"] == "3 of 3"
    assert summary["minutes"] == {"median": 5.0, "min": 2.0, "max": 10.0}
    assert summary["frames"] == {"median": 20, "min": 10, "max": 30}
    table = tts.markdown(summary)
    assert "**5.0** (2.0-10.0)" in table and "Command: `gazelle train`" in table
    write_seed(tmp_path, 4, [row(10, 1.0, 100, 1060.0)])  # one seed that never got there
    summary = tts.summarise(tmp_path, args)
    # the miss counts as later than every seed that reached: the median of 2, 5, 10, miss
    assert summary["reached"] == "3 of 4"
    assert summary["minutes"] == {"median": 7.5, "min": 2.0, "max": None}
    assert summary["frames"] == {"median": 25, "min": 10, "max": None}
    table = tts.markdown(summary)
    assert "reached by 3 of 4 seeds" in table and "**7.5** (2.0-not reached)" in table
    write_seed(tmp_path, 5, [row(10, 1.0, 100, 1060.0)])
    assert tts.summarise(tmp_path, args)["minutes"]["median"] == 10.0  # 2, 5, 10, miss, miss
    write_seed(tmp_path, 6, [row(10, 1.0, 100, 1060.0)])  # half missed: no median reached
    summary = tts.summarise(tmp_path, args)
    assert summary["reached"] == "3 of 6" and summary["minutes"]["median"] is None
    assert "**not reached** (2.0-not reached)" in tts.markdown(summary)


def test_the_median_counts_a_seed_that_missed_as_not_reached():
    assert tts.median_counting_misses([26.5, 27.6], 3) == 27.6
    assert tts.median_counting_misses([20.8, 23.9], 3) == 23.9
    assert tts.median_counting_misses([38.3], 2) == float("inf")
    assert tts.median_counting_misses([3.0, 1.0, 2.0], 3) == 2.0
    assert tts.median_counting_misses([], 1) == float("inf")
    with pytest.raises(ValueError, match="runs"):
        tts.median_counting_misses([1.0, 2.0], 1)


def test_kept_runs_are_read_from_their_gzipped_progress(tmp_path):
    import gzip

    rows = [row(10, 5.0, 100, 1060.0), row(20, 10.0, 100, 1120.0)]
    (tmp_path / "progress.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
    )
    assert tts.rows_of(tmp_path) == rows


def test_the_return_at_the_end_is_summarised_over_every_seed(tmp_path):
    """Each seed's last row is its return at the end; the summary gives their mean and
    (population) standard deviation over all seeds, or nothing when a seed has none."""
    args = tts.argparse.Namespace(threshold=10.0, window=100)
    write_seed(tmp_path, 1, [row(10, 5.0, 100, 1060.0), row(20, 1200.0, 100, 1120.0)])
    write_seed(tmp_path, 2, [row(20, 1500.0, 100, 1120.0)])
    write_seed(tmp_path, 3, [row(20, 1800.0, 100, 1120.0)])
    summary = tts.summarise(tmp_path, args)
    end = summary["end_return"]
    assert end["mean"] == pytest.approx(1500.0) and end["seeds"] == 3
    assert end["std"] == pytest.approx((2 * 300.0**2 / 3) ** 0.5)  # numpy's np.std
    assert (end["median"], end["min"], end["max"]) == (1500.0, 1200.0, 1800.0)
    assert "**1,500.0 +- 244.9** (mean +- std over 3 seeds" in tts.markdown(summary)
    write_seed(tmp_path, 4, [row(20, None, 0, 1120.0)])  # no episode ended
    summary = tts.summarise(tmp_path, args)
    assert "end_return" not in summary and "Return at the end" not in tts.markdown(summary)


#: A stand-in run that logs a return over the threshold at once and ends by itself.
LOGGING_RUN = """
import json, signal, sys, time
from pathlib import Path
# why: as gazelle train does (its own SIGINT handler): a shell's background job inherits
# SIGINT ignored, and the stop at the threshold is a SIGINT
signal.signal(signal.SIGINT, signal.default_int_handler)
logdir = Path(sys.argv[sys.argv.index("--logdir") + 1])
for frames in range(1, 6):
    row = {"frames": frames * 100, "episode_return": 50.0 + frames, "episode_window": 100,
           "wall_time": time.time(), "fps": 10.0}
    with open(logdir / "progress.jsonl", "a") as f:
        f.write(json.dumps(row) + "\\n")
    time.sleep(0.4)
"""


@pytest.mark.parametrize("to_budget", [False, True])
def test_run_to_budget_keeps_a_seed_running_past_its_threshold(tmp_path, to_budget):
    out = tmp_path / "tts"
    extra = ["--run-to-budget"] if to_budget else []
    code = tts.main([
        "--out", str(out), "--seeds", "1", "--threshold", "40", "--poll-s", "0.1",
        "--speed-check-s", "0", *extra, "--", sys.executable, "-c", LOGGING_RUN,
    ])  # fmt: skip
    assert code == 0
    seed = json.loads((out / "report.json").read_text())["seeds"][0]
    assert seed["reached"]["frames"] == 100
    if to_budget:
        assert seed["end_frames"] == 500 and seed["end_return"] == 55.0  # its own end
    else:
        assert seed["end_frames"] < 500  # stopped at the threshold


def test_the_report_shows_the_speed_checks_and_warns_when_the_machine_drifted(tmp_path):
    args = tts.argparse.Namespace(threshold=10.0, window=100)
    write_seed(tmp_path, 1, [row(10, 5.0, 100, 1060.0)], speeds=[300.0, 290.0])
    write_seed(tmp_path, 2, [row(10, 5.0, 100, 1060.0)], speeds=[280.0, None])
    summary = tts.summarise(tmp_path, args)
    assert summary["drift"] == pytest.approx(1 - 280 / 300)  # within DRIFT: no warning
    table = tts.markdown(summary)
    assert "| 300 / 290 |" in table and "| 280 / - |" in table
    assert "drifted" not in table
    write_seed(tmp_path, 3, [row(10, 5.0, 100, 1060.0)], speeds=[240.0, 230.0])
    summary = tts.summarise(tmp_path, args)
    assert summary["drift"] == pytest.approx(1 - 230 / 300)
    assert "drifted**: its speed checks differ by 23%" in tts.markdown(summary)


def test_runs_without_speed_checks_report_none_and_no_drift(tmp_path):
    write_seed(tmp_path, 1, [row(10, 5.0, 100, 1060.0)])  # an older run's launch.json
    summary = tts.summarise(tmp_path, tts.argparse.Namespace(threshold=10.0, window=100))
    assert summary["drift"] is None and "| - / - |" in tts.markdown(summary)
    assert tts.machine_speed(0) is None


def test_a_launch_file_without_its_keys_is_named_in_a_clear_error(tmp_path):
    write_seed(tmp_path, 1, [row(10, 5.0, 100, 1060.0)])
    launch = tmp_path / "seed-1" / "launch.json"
    launch.write_text(json.dumps({"launched": 1000.0}))  # hand-made: no "command"
    args = tts.argparse.Namespace(threshold=10.0, window=100)
    with pytest.raises(SystemExit, match=r"seed-1/launch.json lacks 'command'"):
        tts.summarise(tmp_path, args)
    launch.write_text(json.dumps({}))
    with pytest.raises(SystemExit, match=r"lacks 'launched', 'command'"):
        tts.summarise(tmp_path, args)


#: A stand-in run (any command works): it records its pid, and on SIGINT it "saves" and exits.
FAKE_RUN = """
import signal, sys, time
from pathlib import Path
logdir = Path(sys.argv[sys.argv.index("--logdir") + 1])
def save(signum, frame):
    (logdir / "saved").write_text("yes")
    sys.exit(0)
signal.signal(signal.SIGINT, save)
(logdir / "pid").write_text(str(__import__("os").getpid()))
time.sleep(120)
"""


def as_in_a_terminal() -> None:
    # why: a process started in the background by a shell without job control (as CI
    # starts pytest) inherits SIGINT ignored, and so would the benchmark; a terminal's
    # foreground command has it at its default (Python's Ctrl-C).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_stopping_the_benchmark_stops_its_run_and_no_later_seed_starts(tmp_path, sig):
    """Ctrl-C in a terminal (SIGINT to the benchmark alone: the run has a session of its
    own) or `kill`: the run is stopped as the budget stops it (it saves), not left running."""
    out = tmp_path / "tts"
    bench = subprocess.Popen([
        sys.executable, str(ROOT / "benchmarks" / "time_to_score.py"), "--out", str(out),
        "--seeds", "1", "2", "--threshold", "1", "--poll-s", "0.1", "--speed-check-s", "0",
        "--", sys.executable, "-c", FAKE_RUN,
    ], preexec_fn=as_in_a_terminal)  # fmt: skip
    pid_file = out / "seed-1" / "pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run_pid = int(pid_file.read_text())
    bench.send_signal(sig)
    assert bench.wait(timeout=60) != 0
    assert (out / "seed-1" / "saved").read_text() == "yes"
    with pytest.raises(ProcessLookupError):
        os.kill(run_pid, 0)  # gone
    assert not (out / "seed-2").exists()


@pytest.mark.slow
def test_a_real_run_is_stopped_at_its_threshold_and_reported(tmp_path):
    """CartPole, threshold 40 over 20 episodes: the benchmark stops the run there (not at its
    frame budget), and the report and the curves exist."""
    out = tmp_path / "tts"
    code = tts.main([
        "--out", str(out), "--seeds", "1", "--threshold", "40", "--window", "20",
        "--max-minutes", "5", "--poll-s", "0.5", "--speed-check-s", "0.5", "--",
        sys.executable, "-m", "gazelle.cli", "train", "--env", "CartPole-v1",
        "--num-actors", "1", "--total-frames", "5000000", "--log-interval-s", "1",
    ])  # fmt: skip
    assert code == 0
    summary = json.loads((out / "report.json").read_text())
    seed = summary["seeds"][0]
    assert seed["reached"] is not None and seed["reached"]["frames"] <= seed["end_frames"]
    assert seed["end_frames"] < 5_000_000  # stopped at the threshold, long before the budget
    assert (out / "seed-1" / "checkpoint.pt").exists()  # SIGINT: the run saved and exited
    assert (out / "curves.png").stat().st_size > 10_000
    before, after = seed["speed"]  # the machine speed checks around the run
    assert before > 10 and after > 10


keep_spec = importlib.util.spec_from_file_location(
    "keep_runs", ROOT / "benchmarks" / "keep_runs.py"
)
keep_runs = importlib.util.module_from_spec(keep_spec)
keep_spec.loader.exec_module(keep_runs)


def test_kept_runs_report_as_the_originals_and_minutes_cut_a_longer_run(tmp_path):
    source, dest = tmp_path / "runs", tmp_path / "kept"
    rows = [
        {**row(10, 5.0, 100, 1060.0), "losses/total": 0.5, "episode_return/Pong": 5.0},
        # 2 minutes after launch; a kept diagnostic, kept to 5 significant digits
        {**row(20, 10.0, 100, 1120.0), "losses/total": 0.4, "policy/entropy": 1.2345678},
        {**row(30, 12.0, 100, 1300.0), "losses/total": 0.3},  # 5 minutes
    ]
    write_seed(source / "arm", 1, rows)
    assert keep_runs.main([str(source), str(dest)]) == 0
    kept = tts.rows_of(dest / "arm" / "seed-1")
    assert kept[0] == {**row(10, 5.0, 100, 1060.0), "episode_return/Pong": 5.0}
    assert len(kept) == 3 and "losses/total" not in kept[1]
    assert kept[1]["policy/entropy"] == 1.2346
    assert sorted(p.name for p in (dest / "arm" / "seed-1").iterdir()) == [
        "launch.json", "progress.jsonl.gz"]  # fmt: skip
    args = tts.argparse.Namespace(threshold=10.0, window=100)
    assert tts.summarise(dest / "arm", args) == tts.summarise(source / "arm", args)
    # the first 3 minutes of the run: its end is the 2-minute row, still reached there
    assert keep_runs.main([str(source), str(tmp_path / "cut"), "--minutes", "3"]) == 0
    summary = tts.summarise(tmp_path / "cut" / "arm", args)
    assert summary["seeds"][0]["end_frames"] == 20 and summary["reached"] == "1 of 1"
    assert summary["seeds"][0]["end_minutes"] == 2.0


def test_kept_runs_are_compacted_in_place(tmp_path):
    rows = [{**row(10, 5.0, 100, 1060.123456), "losses/total": 0.5}]
    write_seed(tmp_path / "kept", 1, rows)
    assert keep_runs.main(["--in-place", str(tmp_path / "kept")]) == 0
    seed = tmp_path / "kept" / "seed-1"
    assert not (seed / "progress.jsonl").exists()
    assert tts.rows_of(seed) == [row(10, 5.0, 100, 1060.12)]
    with pytest.raises(SystemExit):
        keep_runs.main(["--in-place", str(tmp_path / "kept"), str(tmp_path / "dest")])
