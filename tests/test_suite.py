"""`gazelle suite`: the flags, the report read from run folders (checked against a hand
computation), and one real suite on CartPole with a game that fails, rerun and resumed."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gazelle.cli import main
from gazelle.config import ConfigError
from gazelle.suite import SUITES, SuiteSpec, parse_games, read_scores, write_report
from gazelle.suite.pairs import pairs

ROOT = Path(__file__).resolve().parents[1]

PONG, BREAKOUT, QBERT = "PongNoFrameskip-v4", "BreakoutNoFrameskip-v4", "QbertNoFrameskip-v4"


def test_a_bad_suite_name_is_one_line_naming_it_and_what_is_allowed(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["suite", "--suite", "atari6", "--frames", "100", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "'atari6'" in err and "allowed: atari5, or a comma list of env ids" in err
    assert not list(tmp_path.iterdir())  # nothing ran


def test_flags_the_suite_sets_are_refused(tmp_path, capsys):
    for flag, value in (("--seed", "3"), ("--total-frames", "9"), ("--logdir", "x")):
        with pytest.raises(SystemExit):
            main(
                [
                    "suite",
                    "--suite",
                    "CartPole-v1",
                    "--frames",
                    "9",
                    "--out",
                    str(tmp_path),
                    flag,
                    value,
                ]
            )
        assert f"{flag}: the suite sets it per run" in capsys.readouterr().err


def _spec_of(out: Path, *flags: str) -> SuiteSpec:
    """The suite a command line describes, parsed as `gazelle suite` parses it."""
    from gazelle.cli import build_parser
    from gazelle.suite.flags import spec_from_args

    argv = ["suite", "--suite", "CartPole-v1", "--frames", "9", "--out", str(out), *flags]
    return spec_from_args(build_parser().parse_args(argv), argv[1:])


def test_the_ray_flags_need_the_ray_suite_backend_and_size_each_runs_task(
    tmp_path, capsys, monkeypatch
):
    given = (
        ("--run-cpus", "2"),
        ("--run-gpus", "1"),
        ("--suite-ray-address", "127.0.0.1:6379"),
        ("--suite-ray-allow-tokenless",),
    )
    for flag in given:
        with pytest.raises(SystemExit) as exit_:
            main(
                ["suite", "--suite", "CartPole-v1", "--frames", "9", "--out", str(tmp_path), *flag]
            )
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1, err
        assert (
            f"{flag[0]}: invalid value" in err and "allowed: only with --suite-backend ray" in err
        )
    with pytest.raises(ConfigError, match=r"^--suite-ray-allow-tokenless: .*--suite-ray-address$"):
        _spec_of(tmp_path, "--suite-backend", "ray", "--suite-ray-allow-tokenless")
    with pytest.raises(ConfigError, match=r"^--run-gpus: invalid value 0; allowed: at least 1"):
        _spec_of(tmp_path, "--suite-backend", "ray", "--device", "cuda", "--run-gpus", "0")
    ray = ("--suite-backend", "ray")
    unset = _spec_of(tmp_path, *ray)  # a whole node, and a GPU if any: read from the cluster
    assert (unset.backend, unset.run_cpus, unset.run_gpus) == ("ray", None, None)
    assert _spec_of(tmp_path, *ray, "--num-actors", "3").run_cpus == 4.0  # actors + learner
    assert _spec_of(tmp_path, *ray, "--backend", "ray").run_cpus == 1.0  # its actors ask Ray
    assert _spec_of(tmp_path, *ray, "--run-cpus", "2.5", "--num-actors", "7").run_cpus == 2.5
    assert _spec_of(tmp_path, *ray, "--device", "cpu").run_gpus == 0.0
    assert _spec_of(tmp_path, *ray, "--num-actors", "3").train_args == ("--num-actors", "3")
    monkeypatch.chdir(
        tmp_path
    )  # why: OUT is made absolute (a Ray task's working folder is not ours)
    assert _spec_of(Path("rel")).out == tmp_path / "rel"


def test_each_ray_task_asks_for_a_whole_node_by_default_and_one_that_fits_nowhere_is_refused(
    tmp_path,
):
    from gazelle.suite.on_ray import at_once, resources

    nodes = [
        {"Alive": True, "Resources": {"CPU": 8.0}},
        {"Alive": True, "Resources": {"CPU": 16.0, "GPU": 2.0}},
        {"Alive": False, "Resources": {"CPU": 64.0}},  # gone: not counted
    ]
    spec = SuiteSpec("s", ("CartPole-v1",), (1,), 9, None, tmp_path, backend="ray")
    assert resources(spec, nodes) == (16.0, 1.0) and at_once(nodes, 16.0, 1.0) == 1
    two = dataclasses.replace(spec, run_cpus=4.0, run_gpus=0.0)
    assert resources(two, nodes) == (4.0, 0.0) and at_once(nodes, 4.0, 0.0) == 2 + 4
    assert at_once(nodes, 4.0, 1.0) == 2
    with pytest.raises(ConfigError) as error:
        resources(dataclasses.replace(spec, run_cpus=32.0, run_gpus=0.0), nodes)
    assert str(error.value) == (
        "--run-cpus: no node has 32 CPUs and 0 GPUs for one run; allowed: what one node has "
        "(the Ray cluster's nodes: 8 CPUs + 0 GPUs, 16 CPUs + 2 GPUs)"
    )
    with pytest.raises(ConfigError, match=r"^--run-gpus: no node has 8 CPUs and 3 GPUs"):
        resources(dataclasses.replace(spec, run_cpus=8.0, run_gpus=3.0), nodes)


#: A stand-in run: each SIGINT appends a line to the file argv[1] names; it exits 0.6 s
#: after the first (a run saving its checkpoint).
_RUN = """\
import pathlib, signal, sys, time
mark = pathlib.Path(sys.argv[1])
def stop(*_):
    with mark.open("a") as file:
        file.write("sigint\\n")
signal.signal(signal.SIGINT, stop)
mark.with_name("ready").write_text("")
while not mark.exists():
    time.sleep(0.01)
time.sleep(0.6)
"""


def test_a_run_gets_one_sigint_when_whoever_started_it_dies(tmp_path):
    """A suite or a Ray worker killed while its run trains: the run gets SIGINT, once (it
    saves and exits, as on Ctrl-C), instead of training on with nobody to report it."""
    from gazelle.suite.runner import ORPHAN_GUARD

    mark, ready = tmp_path / "mark", tmp_path / "ready"
    starter = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {ORPHAN_GUARD!r}, str(os.getpid()), "
        f"sys.executable, '-c', {_RUN!r}, {str(mark)!r}], start_new_session=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", starter])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), "the run never started"
        time.sleep(0.2)
        assert not mark.exists()  # no SIGINT while its starter lives
    finally:
        parent.kill()  # SIGKILL: no chance to stop its child itself
        parent.wait()
    deadline = time.monotonic() + 10
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.8)  # the stand-in's save: a second SIGINT (0.2 s polls) would land here
    assert mark.read_text() == "sigint\n"


def test_suite_names_and_lists():
    assert parse_games("atari5") == SUITES["atari5"]
    assert len(SUITES["atari5"]) == 5 and all("NoFrameskip-v4" in g for g in SUITES["atari5"])
    assert parse_games("CartPole-v1,Acrobot-v1") == ("CartPole-v1", "Acrobot-v1")
    assert parse_games("ALE/Pong-v5") == ("ALE/Pong-v5",)
    with pytest.raises(ConfigError, match="names each env id once"):
        parse_games("CartPole-v1,,Acrobot-v1")


def test_a_scores_file_in_json_or_toml(tmp_path):
    (tmp_path / "s.toml").write_text("[MyEnv-v0]\nrandom = 1\nhuman = 11\n")
    (tmp_path / "s.json").write_text(json.dumps({"MyEnv-v0": {"random": 1, "human": 11}}))
    for name in ("s.toml", "s.json"):
        assert read_scores(tmp_path / name) == {"MyEnv-v0": (1.0, 11.0)}
    (tmp_path / "bad.json").write_text(json.dumps({"MyEnv-v0": {"random": 1}}))
    with pytest.raises(ConfigError, match="bad entry 'MyEnv-v0'"):
        read_scores(tmp_path / "bad.json")


def _fake_run(pair, status, rows):
    pair.logdir.mkdir(parents=True)
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (pair.logdir / "progress.jsonl").write_text(text)
    pair.status_path.write_text(json.dumps({"status": status, "command": f"cmd {pair.seed}"}))


def _row(frames, value, window=100, time=10.0):
    return {"frames": frames, "time": time, "episode_return": value, "episode_window": window}


def test_the_report_of_run_folders_matches_a_hand_computation(tmp_path):
    """Pong (random -20.7, human 14.6) seeds at 50% and 100%; Breakout (1.7, 30.5) one seed
    at 25% and one failed (its 30.5 must not count); Qbert scored by the user's table (0,
    100) at 10% and 30%. Game means 75, 25, 20: median 25. Pooled 10, 25, 30, 50, 100: the
    IQM drops one from each end, (25 + 30 + 50) / 3 = 35."""
    spec = SuiteSpec(
        name="three",
        games=(PONG, BREAKOUT, QBERT),
        seeds=(1, 2),
        frames=1000,
        minutes=None,
        out=tmp_path,
        thresholds={PONG: 10.0, BREAKOUT: 5.0},
        scores={QBERT: (0.0, 100.0)},
    )
    runs = {(p.game, p.seed): p for p in pairs(spec)}
    # an early row over the threshold with a window of 50 episodes only: not reached
    _fake_run(runs[PONG, 1], "done", [_row(500, 12.0, window=50), _row(1000, -3.05)])
    _fake_run(runs[PONG, 2], "done", [_row(1000, 14.6)])
    _fake_run(runs[BREAKOUT, 1], "done", [_row(1000, 8.9)])
    _fake_run(runs[BREAKOUT, 2], "failed", [_row(600, 30.5)])
    _fake_run(runs[QBERT, 1], "done", [_row(1000, 10.0)])
    _fake_run(runs[QBERT, 2], "done", [_row(1000, 30.0, time=20.0)])
    report = write_report(spec, "gazelle suite ...", figure=False)
    assert json.loads((tmp_path / "report.json").read_text()) == report
    games = report["per_game"]
    assert games[PONG]["human_normalized"]["mean"] == pytest.approx(75.0)
    assert games[PONG]["final_return"]["mean"] == pytest.approx((14.6 - 3.05) / 2)
    assert games[PONG]["threshold"] == {"value": 10.0, "reached": "1 of 2", "seeds_reached": [2]}
    assert games[BREAKOUT]["seeds_scored"] == "1 of 2"
    assert games[BREAKOUT]["not_scored"] == {"2": "failed"}
    assert games[BREAKOUT]["threshold"]["reached"] == "1 of 2"
    assert games[BREAKOUT]["human_normalized"]["mean"] == pytest.approx(25.0)
    assert games[QBERT]["reference"] == [0.0, 100.0]
    assert games[QBERT]["fps"] == pytest.approx((100.0 + 50.0) / 2)
    agg = report["aggregate"]
    assert agg["runs"] == 5 and agg["left_out"] == {}
    assert agg["median"]["value"] == pytest.approx(25.0)
    assert agg["iqm"]["value"] == pytest.approx(35.0)
    for name in ("median", "iqm"):
        low, high = agg[name]["ci95"]
        assert low <= agg[name]["value"] <= high
    page = (tmp_path / "report.md").read_text()
    assert "Median: **25.0**" in page and "IQM: **35.0**" in page
    assert "| BreakoutNoFrameskip-v4 | 2 | failed |" in page
    assert all(f"`cmd {seed}`" in page for seed in (1, 2))


def test_what_a_pass_runs_again_by_status_and_retry_failed(tmp_path):
    from gazelle.suite.pairs import should_run, write_status

    spec = SuiteSpec("s", ("CartPole-v1",), (1,), 9, None, tmp_path)
    retry = dataclasses.replace(spec, retry_failed=True)
    pair = pairs(spec)[0]
    pair.status_path.parent.mkdir(parents=True)
    assert should_run(spec, pair) and should_run(retry, pair)  # not started
    expected = {"running": True, "interrupted": True, "done": False, "failed": False}
    for status, again in expected.items():
        write_status(pair, status=status)
        assert should_run(spec, pair) is again, status
        assert should_run(retry, pair) is (again or status == "failed"), status


def _suite(out: Path, scores: Path) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "gazelle.cli",
        "suite",
        "--suite",
        "CartPole-v1,NoSuchEnv-v0",
        "--seeds",
        "1",
        "2",
        "--frames",
        "300",
        "--out",
        str(out),
        "--scores",
        str(scores),
        "--threshold",
        "CartPole-v1=1",
        "--num-actors",
        "1",
    ]
    # why: the runs import the tree under test, not an installed gazelle
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_a_suite_runs_reports_skips_what_finished_and_resumes(tmp_path):
    out, scores = tmp_path / "suite", tmp_path / "scores.json"
    scores.write_text(json.dumps({"CartPole-v1": {"random": 22.0, "human": 500.0}}))
    first = _suite(out, scores)
    assert first.returncode == 1, first.stdout + first.stderr  # a run failed
    report = json.loads((out / "report.json").read_text())
    runs = {(r["game"], r["seed"]): r for r in report["runs"]}
    assert len(runs) == 4
    page = (out / "report.md").read_text()
    for (game, seed), run in runs.items():
        assert (
            f"--env {game} --seed {seed} --logdir {out / game / f'seed-{seed}'}" in (run["command"])
        )
        assert run["command"].endswith("--total-frames 300 --num-actors 1")
        assert run["command"] in page
        if game == "CartPole-v1":
            assert run["status"] == "done" and run["frames"] >= 300
            assert run["final_return"] is not None and run["reached_at_frames"] is None
        else:  # reported as failed, never dropped, while CartPole's runs finished
            assert run["status"] == "failed" and "NoSuchEnv-v0" in run["error"]
    assert report["per_game"]["CartPole-v1"]["seeds_scored"] == "2 of 2"
    assert report["per_game"]["NoSuchEnv-v0"]["not_scored"] == {"1": "failed", "2": "failed"}
    assert report["aggregate"]["games"] == ["CartPole-v1"] and "median" in report["aggregate"]
    assert (out / "curves.png").stat().st_size > 0

    # one pass again: the three finished or failed runs are skipped (their consoles untouched)
    # and an interrupted run (its status, and no progress row at its budget) resumes
    status_path = out / "CartPole-v1" / "seed-2.json"
    status_path.write_text(
        json.dumps({**json.loads(status_path.read_text()), "status": "interrupted"})
    )
    (out / "CartPole-v1" / "seed-2" / "progress.jsonl").write_text("")
    resumed_log = out / "CartPole-v1" / "seed-2.log"
    logs = {path: path.read_bytes() for path in out.rglob("seed-*.log") if path != resumed_log}
    resumed = _suite(out, scores)
    assert resumed.returncode == 1
    assert resumed.stdout.count("not run again") == 3, resumed.stdout
    assert {path: path.read_bytes() for path in logs} == logs
    assert resumed.stdout.count(": running") == 1, resumed.stdout
    assert "[2/4] CartPole-v1 seed 2: running" in resumed.stdout
    assert "[2/4] CartPole-v1 seed 2: done" in resumed.stdout
    assert "gazelle: resumed from" in resumed_log.read_text()
    status = json.loads(status_path.read_text())
    assert status["status"] == "done" and status["attempts"] == 2
