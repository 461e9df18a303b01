"""Tests of gazelle.envs.vector: SerialEnvs and VectorEnv (real processes, real shm).

The test envs live in tests/vector_envs.py, importable by spawned workers because pytest
puts tests/ on sys.path (rootdir without __init__.py) and spawn copies sys.path.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gazelle.bench import env as bench_env
from gazelle.envs.vector import SHM_PREFIX, BatchStep, SerialEnvs, VectorEnv
from vector_envs import FRAME_SHAPE, CounterEnv, make_broken, make_counter

TESTS_DIR = Path(__file__).resolve().parent

#: A batch that exercises every path: termination, truncation, life loss, an instruction,
#: an env that raises in step and one whose auto-reset raises.
MIXED = [
    partial(make_counter, term_at=4, instruction=True),
    partial(make_counter, trunc_at=3, instruction=True),
    partial(make_counter, term_at=2, lives=3, instruction=True),
    partial(make_counter, trunc_at=5, raise_step_at=4, instruction=True),
    partial(make_counter, trunc_at=2, raise_reset_at=3, instruction=True),
]


def _segments(pid: int) -> list[str]:
    """Shared-memory segments created by process `pid` that still exist."""
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"{SHM_PREFIX}{pid}_")]


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _assert_same(a: BatchStep, b: BatchStep) -> None:
    np.testing.assert_array_equal(a.obs["frame"], b.obs["frame"])
    assert a.obs.get("instruction") == b.obs.get("instruction")
    for name in ("reward", "terminated", "truncated", "game_over"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("episode_return", "episode_length"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.final_obs.keys() == b.final_obs.keys()
    for i in a.final_obs:
        np.testing.assert_array_equal(a.final_obs[i]["frame"], b.final_obs[i]["frame"])
        assert a.final_obs[i].get("instruction") == b.final_obs[i].get("instruction")
    assert a.errors == b.errors


def _run(envs: Any, actions: np.ndarray) -> list[BatchStep]:
    """Step through `actions` [T, N], copying the frames (the batch reuses its buffer)."""
    out = []
    for step_actions in actions:
        step = envs.step(step_actions)
        out.append(step._replace(obs={**step.obs, "frame": step.obs["frame"].copy()}))
    return out


# --- SerialEnvs: the per-env logic, in process -------------------------------------------


def test_obs_spec_and_seeded_first_reset() -> None:
    with SerialEnvs([partial(make_counter, num_actions=5, instruction=True)] * 2, [7, 8]) as e:
        obs = e.reset()
        assert e.obs_spec.frame_shape == FRAME_SHAPE
        assert e.obs_spec.frame_dtype == np.uint8
        assert e.obs_spec.num_actions == 5 and e.obs_spec.has_instruction
        for i, seed in enumerate([7, 8]):
            expected = CounterEnv(instruction=True).reset(seed=seed)[0]
            np.testing.assert_array_equal(obs["frame"][i], expected["frame"])
            assert obs["instruction"][i] == expected["instruction"]
        assert not obs["frame"].flags.writeable


def test_step_checks_reset_and_action_shape() -> None:
    with SerialEnvs([make_counter] * 2) as envs:
        with pytest.raises(RuntimeError, match="reset"):
            envs.step(np.zeros(2, np.int64))
        envs.reset()
        with pytest.raises(ValueError, match="shape"):
            envs.step(np.zeros(3, np.int64))


def test_final_obs_on_truncation_and_termination() -> None:
    with SerialEnvs([partial(make_counter, trunc_at=2), partial(make_counter, term_at=2)]) as e:
        e.reset()
        first = e.step(np.array([1, 2]))
        assert first.final_obs == {}
        second = e.step(np.array([2, 1]))
        np.testing.assert_array_equal(second.truncated, [True, False])
        np.testing.assert_array_equal(second.terminated, [False, True])
        np.testing.assert_array_equal(second.game_over, [True, True])
        for i, action in enumerate([2, 1]):
            # frame[0,0,0] is the step in the episode, frame[1,0,0] the last action
            assert second.final_obs[i]["frame"][0, 0, 0] == 2
            assert second.final_obs[i]["frame"][1, 0, 0] == action
            assert second.obs["frame"][i, 0, 0, 0] == 0  # already the next episode
        np.testing.assert_array_equal(second.episode_length, [2, 2])
        third = e.step(np.array([0, 0]))
        np.testing.assert_array_equal(third.episode_length, [1, 1])


def test_episode_totals_run_across_life_loss() -> None:
    reference = CounterEnv(term_at=2, lives=2)
    reference.reset(seed=3)
    rewards = []
    for _ in range(5):
        _, reward, terminated, _, _ = reference.step(1)
        rewards.append(reward)
        if terminated:
            reference.reset()
    with SerialEnvs([partial(make_counter, term_at=2, lives=2)], seeds=[3]) as envs:
        envs.reset()
        steps = [envs.step(np.array([1])) for _ in range(5)]
    np.testing.assert_array_equal([s.terminated[0] for s in steps], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal([s.game_over[0] for s in steps], [0, 0, 0, 1, 0])
    np.testing.assert_array_equal([s.episode_length[0] for s in steps], [1, 2, 3, 4, 1])
    expected_return = np.cumsum(rewards)
    expected_return[4] = rewards[4]  # a new game starts after the game over at step 4
    np.testing.assert_allclose([s.episode_return[0] for s in steps], expected_return)
    np.testing.assert_allclose([s.reward[0] for s in steps], rewards)


def test_env_error_resets_that_env_and_the_others_go_on() -> None:
    with SerialEnvs([make_counter, partial(make_counter, raise_step_at=3)]) as envs:
        envs.reset()
        envs.step(np.array([1, 1]))
        before = envs.step(np.array([1, 2])).obs["frame"].copy()
        failed = envs.step(np.array([1, 1]))
        assert len(failed.errors) == 1 and failed.errors[0][0] == 1
        assert "step failed on purpose" in failed.errors[0][1]
        assert failed.truncated[1] and not failed.terminated[1] and not failed.game_over[1]
        assert failed.reward[1] == 0.0 and failed.episode_length[1] == 2
        np.testing.assert_array_equal(failed.final_obs[1]["frame"], before[1])
        assert failed.obs["frame"][1, 0, 0, 0] == 0  # reset
        assert failed.obs["frame"][0, 0, 0, 0] == 3 and not failed.truncated[0]
        after = envs.step(np.array([1, 1]))
        assert after.errors == [] and after.episode_length.tolist() == [4, 1]


def test_failing_reset_rebuilds_the_env() -> None:
    with SerialEnvs([partial(make_counter, trunc_at=2, raise_reset_at=2)]) as envs:
        envs.reset()
        assert envs.step(np.array([0])).errors == []
        step = envs.step(np.array([0]))  # truncation; the auto-reset raises
        assert step.truncated[0] and step.game_over[0] and step.errors[0][0] == 0
        assert "reset failed on purpose" in step.errors[0][1]
        assert step.final_obs[0]["frame"][0, 0, 0] == 2
        assert step.obs["frame"][0, 0, 0, 0] == 0  # the rebuilt env's first observation
        step = envs.step(np.array([0]))
        assert step.errors == [] and step.obs["frame"][0, 0, 0, 0] == 1


# --- VectorEnv: processes and shared memory ----------------------------------------------


def test_vector_matches_serial_and_closes_cleanly() -> None:
    seeds = list(range(10, 10 + len(MIXED)))
    actions = np.random.default_rng(0).integers(0, 3, size=(12, len(MIXED)))
    with SerialEnvs(MIXED, seeds=seeds) as serial:
        serial_reset = serial.reset()["frame"].copy()
        expected = _run(serial, actions)
    vector = VectorEnv(MIXED, num_workers=2, seeds=seeds, timeout=60)
    pids = vector.worker_pids
    try:
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        assert len(_segments(os.getpid())) == 1
        np.testing.assert_array_equal(vector.reset()["frame"], serial_reset)
        got = _run(vector, actions)
    finally:
        vector.close()
    for a, b in zip(got, expected):
        _assert_same(a, b)
    assert any(s.errors for s in got) and any(s.truncated.any() for s in got)
    assert not set(pids) & {p.pid for p in mp.active_children()}
    assert _wait_dead(pids, 1.0) == []
    assert _segments(os.getpid()) == []


@pytest.mark.slow
def test_forkserver_and_one_worker_per_env() -> None:
    actions = np.ones((3, 3), np.int64)
    with SerialEnvs([make_counter] * 3, seeds=[1, 2, 3]) as serial:
        serial.reset()
        expected = _run(serial, actions)
    with VectorEnv([make_counter] * 3, context="forkserver", seeds=[1, 2, 3]) as vector:
        assert len(vector.worker_pids) == 3 or os.cpu_count() == 2
        vector.reset()
        for a, b in zip(_run(vector, actions), expected):
            _assert_same(a, b)
    assert _segments(os.getpid()) == []


@pytest.mark.slow
def test_collected_without_close_cleans_up() -> None:
    vector = VectorEnv([make_counter] * 2)
    pids = vector.worker_pids
    frames = vector.reset()["frame"]  # a view over shared memory that outlives the batch
    del vector
    assert _wait_dead(pids, 10.0) == []
    assert _segments(os.getpid()) == []
    assert frames.shape == (2, *FRAME_SHAPE)


@pytest.mark.slow
def test_broken_factory_raises_and_leaves_nothing() -> None:
    before = {p.pid for p in mp.active_children()}
    with pytest.raises(RuntimeError, match="cannot build this env"):
        VectorEnv([make_counter, make_broken], num_workers=2)
    assert {p.pid for p in mp.active_children()} <= before
    assert _segments(os.getpid()) == []


@pytest.mark.slow
def test_killed_worker_raises_naming_its_envs() -> None:
    with VectorEnv([make_counter] * 4, num_workers=2, timeout=60) as vector:
        vector.reset()
        os.kill(vector.worker_pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"envs \[2, 3\]") as info:
            vector.step(np.zeros(4, np.int64))
        assert "died" in str(info.value)
        assert time.monotonic() - start < 10.0  # noticed at once, not after the timeout
        with pytest.raises(RuntimeError, match="unusable"):
            vector.step(np.zeros(4, np.int64))
    assert _segments(os.getpid()) == []


@pytest.mark.slow
def test_hung_env_times_out_and_close_kills_it() -> None:
    vector = VectorEnv([make_counter, partial(make_counter, hang_at=1)], timeout=1.0)
    pids = vector.worker_pids
    vector.reset()
    with pytest.raises(RuntimeError, match=r"within 1 s \(envs \[1\]\)"):
        vector.step(np.zeros(2, np.int64))
    start = time.monotonic()
    vector.close(timeout=1.0)
    assert time.monotonic() - start < 8.0
    assert _wait_dead(pids, 1.0) == []
    assert _segments(os.getpid()) == []


#: A parent process: makes a VectorEnv, prints its pid and the workers', then steps forever
#: (argument "step") or sleeps, its workers waiting for a command (argument "idle").
PARENT_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    from functools import partial
    import numpy as np
    from vector_envs import make_counter
    from gazelle.envs.vector import VectorEnv

    if __name__ == "__main__":
        envs = VectorEnv([partial(make_counter, trunc_at=5)] * 4, num_workers=2)
        envs.reset()
        print(json.dumps({"pid": os.getpid(), "workers": envs.worker_pids}), flush=True)
        while True:
            if sys.argv[1] == "step":
                envs.step(np.zeros(4, np.int64))
            else:
                time.sleep(1)
    """
)


def _start_parent(mode: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a terminal gives a program
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(proc.communicate(timeout=30)[1])
    info = json.loads(line)
    assert _segments(info["pid"]) != []
    return proc, info


def _kill_all(pids: list[int]) -> None:
    """Kill what a failed test left running."""
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_ctrl_c_in_parent_stops_workers_and_frees_shm() -> None:
    proc, info = _start_parent("step")
    try:
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole process group
        proc.wait(timeout=30)
        assert _wait_dead(info["workers"], 5.0) == []
        assert _segments(info["pid"]) == []
        _, stderr = proc.communicate(timeout=10)
        # the parent's KeyboardInterrupt only: the workers ignore SIGINT and exit when told
        assert "KeyboardInterrupt" in stderr and stderr.count("Traceback") == 1, stderr
    finally:
        _kill_all([info["pid"], *info["workers"]])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["idle", "step"])
def test_sigkilled_parent_leaves_no_worker_and_no_shm(mode: str) -> None:
    proc, info = _start_parent(mode)
    try:
        time.sleep(0.3)
        proc.kill()
        proc.wait(timeout=30)
        assert _wait_dead(info["workers"], 10.0) == []
        deadline = time.monotonic() + 5.0
        while _segments(info["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _segments(info["pid"]) == []
    finally:
        _kill_all(info["workers"])
        proc.communicate(timeout=10)  # close the pipes


@pytest.mark.slow
def test_bench_env_prints_rates_and_a_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--env", "CartPole-v1", "--seconds", "0.3", "--num-workers", "2"]
    bench_env.main([*argv, "--envs-per-worker", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert "steps/s" in lines[1] and "steps/s" in lines[2]
    assert result["num_workers"] == 2 and result["num_envs"] == 4
    assert result["action_repeats"] == 1
    for key in ("serial", "pool"):
        assert result[f"{key}_steps_per_s"] > 100
        assert result[f"{key}_frames_per_s"] == result[f"{key}_steps_per_s"]
        assert result[f"{key}_cpu_us_per_step"] > 0
    assert _segments(os.getpid()) == []
