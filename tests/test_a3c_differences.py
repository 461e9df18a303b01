"""benchmarks/a3c_differences.py: each arm is the gazelle preset with exactly one of the four
points switched to the seed's way (as gazelle's own CLI parses its flags), the seeds run
outermost and done ones are skipped, and the report reads time_to_score.py's per-arm
reports. No training is run."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gazelle.algorithms.a3c.presets import GAZELLE_A3C_AGENT, UNIVERSE_STARTER_AGENT
from gazelle.cli import build_parser, config_from_args
from gazelle.config import resolve, validate
from gazelle.envs.probe import EnvProbe
from gazelle.types import ObsSpec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
spec = importlib.util.spec_from_file_location(
    "a3c_differences", ROOT / "benchmarks" / "a3c_differences.py"
)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

ATARI = EnvProbe(["PongNoFrameskip-v4"], ObsSpec((1, 42, 42), np.dtype(np.uint8), 6), 4, "atari")


def points(arm: str) -> dict[str, object]:
    """The four points of the config an arm's command runs, as gazelle's CLI parses it."""
    command = bench.train_command("PongNoFrameskip-v4", 1.0, arm)
    assert command[:2] == ["gazelle", "train"]
    config = resolve(validate(config_from_args(build_parser().parse_args(command[1:]))), ATARI)
    assert config.algo == "a3c" and config.run.max_seconds == 60
    got = {name: getattr(config.a3c, name, None) for name in GAZELLE_A3C_AGENT}
    got["init"] = config.model.init
    return got


def test_each_arm_switches_one_point_the_seeds_way_and_the_ends_are_the_presets():
    # the baseline: gazelle's way in all four points (the preset before the grid chose
    # rollouts that end at an episode's end, which makes the preset that arm)
    gazelles_way = {**GAZELLE_A3C_AGENT, "end_rollout_at_episode_end": False}
    assert points("gazelle") == gazelles_way
    assert points("end-at-episode-end") == GAZELLE_A3C_AGENT
    assert points("universe-starter") == UNIVERSE_STARTER_AGENT
    differences = [arm for arm in bench.ARMS if arm not in ("gazelle", "universe-starter")]
    switched = set()
    for arm in differences:
        got = points(arm)
        changed = {name for name in got if got[name] != gazelles_way[name]}
        assert len(changed) == 1, (arm, changed)
        (name,) = changed
        assert got[name] == UNIVERSE_STARTER_AGENT[name]
        switched.add(name)
    assert switched == set(UNIVERSE_STARTER_AGENT)  # all four, once each


def test_every_pong_arm_runs_the_step_and_clip_the_grid_ran_with():
    # the gazelle preset's Atari step and clip changed after the grid (2e-4, 15); its arms
    # keep the seed's 1e-4 and 40, so a rerun is the run in docs/results.md's table
    for arm in bench.ARMS:
        command = bench.train_command("PongNoFrameskip-v4", 1.0, arm)
        config = resolve(validate(config_from_args(build_parser().parse_args(command[1:]))),
                         ATARI)  # fmt: skip
        assert (config.a3c.learning_rate, config.a3c.grad_norm_clip) == (1e-4, 40.0), arm
    # the vector preset did not change: CartPole's arms add no optimiser flag
    cartpole = bench.train_command("CartPole-v1", 1.0, "gazelle")
    assert "--learning-rate" not in cartpole and "--grad-norm-clip" not in cartpole


def test_seeds_run_outermost_and_done_seeds_are_skipped(tmp_path):
    args = bench.argparse.Namespace(out=tmp_path, seeds=[1, 2], arms=["gazelle", "init-universe"],
                                    env="CartPole-v1", minutes=5.0, threshold=475.0,
                                    speed_check_s=2.5)  # fmt: skip
    (tmp_path / "init-universe" / "seed-1").mkdir(parents=True)
    assert bench.plan(args) == [("gazelle", 1), ("gazelle", 2), ("init-universe", 2)]
    command = bench.run_command(args, "init-universe", 2)
    assert command[command.index("--out") + 1] == str(tmp_path / "init-universe")
    assert command[command.index("--seeds") + 1 :][:1] == ["2"]
    assert command[command.index("--max-minutes") + 1] == "7.0"  # 5 minutes + the grace
    assert command[command.index("--speed-check-s") + 1] == "2.5"
    assert command[command.index("--") + 1 :] == [
        "gazelle", "train", "--algo", "a3c", "--env", "CartPole-v1", "--max-seconds", "300",
        "--init", "universe", "--no-end-rollout-at-episode-end",
    ]  # fmt: skip


def test_the_report_reads_each_arms_seeds(tmp_path):
    def run(arm, n, end, reached_minutes=None):
        """A run as time_to_score.py leaves it (and keep_runs.py keeps it): its launch file
        and progress rows, ending at `end` after 2M frames, at the threshold's minute if
        it reached it, else at 60."""
        logdir = tmp_path / arm / f"seed-{n}"
        logdir.mkdir(parents=True)
        launch = {"launched": 1000.0, "command": bench.train_command("PongNoFrameskip-v4", 60, arm)}
        (logdir / "launch.json").write_text(json.dumps(launch))
        minutes = reached_minutes if reached_minutes is not None else 60.0
        rows = [
            {"frames": f, "episode_return": r, "episode_window": 100, "wall_time": 1000 + 60 * m}
            for f, r, m in ((1e5, -21.0, 1.0), (1e6, -15.0, 0.5 * minutes), (2e6, end, minutes))
        ]
        (logdir / "progress.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")

    run("gazelle", 1, -3.0)
    run("gazelle", 2, 18.5, 41.2)
    run("acting-values", 2, 5.0)
    run("init-universe", 1, 18.0, 50.0)
    run("init-universe", 2, 18.4, 30.0)
    args = bench.argparse.Namespace(out=tmp_path, seeds=[1, 2], env="PongNoFrameskip-v4",
                                    minutes=60.0, threshold=18.0)  # fmt: skip
    summary = bench.summarise(args)
    assert list(summary["arms"]) == ["gazelle", "init-universe", "acting-values"]
    assert summary["arms"]["gazelle"]["median"] == pytest.approx(7.75)
    table = bench.markdown(summary)
    assert "| -3.0 (2.00M) | 18.5 (2.00M), 18 at 41.2 min | 7.8 | 1 of 2 seeds |" in table
    assert ("`--advantage-values acting --no-end-rollout-at-episode-end` | - | 5.0 (2.00M) | "
            "5.0 | 0 of 2 seeds |") in table  # fmt: skip
    # every seed reached it: the median of their minutes (not of the seed that did, alone)
    assert "| 18.2 | 40.0 min |" in table
    # the whole report from the command line, with the curves of the runs' progress rows
    argv = ["--out", str(tmp_path), "--env", "PongNoFrameskip-v4", "--minutes", "60",
            "--threshold", "18", "--report"]  # fmt: skip
    assert bench.main(argv) == 0
    assert (tmp_path / "report.md").read_text() == table
    assert (tmp_path / "curves.png").stat().st_size > 10_000


#: A stand-in for `gazelle` on PATH: it records its pid, and on SIGINT (time_to_score.py's
#: stop) it "saves" and exits.
FAKE_GAZELLE = """#!{python}
import os, signal, sys, time
from pathlib import Path
logdir = Path(sys.argv[sys.argv.index("--logdir") + 1])
def save(signum, frame):
    (logdir / "saved").write_text("yes")
    sys.exit(0)
signal.signal(signal.SIGINT, save)
(logdir / "pid").write_text(str(os.getpid()))
time.sleep(120)
"""


def as_in_a_terminal() -> None:
    # why: CI starts pytest in the background, where SIGINT is inherited ignored; a
    # terminal's foreground command has it at its default (Python's Ctrl-C).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_stopping_the_grid_stops_the_running_seed_and_no_later_arm_starts(tmp_path, sig):
    """Ctrl-C or `kill` of the grid: its time_to_score.py child stops the training run (it
    saves) and exits, and no later arm starts. Before, Ctrl-C SIGKILLed the child before it
    could stop its run, and `kill` left the child running the grid's seeds."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "gazelle"
    fake.write_text(FAKE_GAZELLE.format(python=sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "grid"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    grid = subprocess.Popen([
        sys.executable, str(ROOT / "benchmarks" / "a3c_differences.py"), "--out", str(out),
        "--env", "CartPole-v1", "--seeds", "1", "--minutes", "5", "--threshold", "475",
        "--arms", "gazelle", "init-universe", "--speed-check-s", "0",
    ], env=env, preexec_fn=as_in_a_terminal)  # fmt: skip
    logdir = out / "gazelle" / "seed-1"
    deadline = time.monotonic() + 60
    while not (logdir / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run_pid = int((logdir / "pid").read_text())
    grid.send_signal(sig)
    assert grid.wait(timeout=60) != 0
    assert (logdir / "saved").read_text() == "yes"
    with pytest.raises(ProcessLookupError):
        os.kill(run_pid, 0)  # gone
    assert not (out / "init-universe").exists()
    # the time_to_score.py child is gone too: nothing is left in its session
    assert not [line for line in subprocess.run(
        ["ps", "-eo", "args"], capture_output=True, text=True, check=True
    ).stdout.splitlines() if str(out) in line]  # fmt: skip
