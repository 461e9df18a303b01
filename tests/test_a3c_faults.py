"""A3C's loop watches its fleet and its parameter server as IMPALA's does: a stopped worker is
found by its heartbeat, killed and replaced; a fleet or server that fails ends the run with
one line and a final checkpoint (or one line saying why there is none)."""

import os
import signal
import time

import pytest

from gazelle import checkpoint
from gazelle.algorithms.a3c import train
from gazelle.algorithms.a3c.shared_adam import SharedAdamServer
from gazelle.algorithms.stops import RunStopped
from gazelle.backends.local.process import TaskFleet
from gazelle.cli import main
from test_reliability import _alive


def worker_pids():
    import multiprocessing

    return [
        p.pid for p in multiprocessing.active_children() if p.name.startswith("gazelle-worker-")
    ]


@pytest.mark.slow
def test_a_stopped_a3c_worker_is_found_killed_and_replaced(small_config, capsys, monkeypatch):
    from gazelle.backends.local import process

    stopped: list[int] = []
    printed: list[str] = []

    def stop_one(progress):
        pids = worker_pids()
        # why: after 20 updates both workers have most likely sent theirs, so beaten: the
        # stopped one is then found after actor_timeout_s (10 s), not the start allowance.
        if not stopped and progress["updates"] >= 20 and pids:
            os.kill(pids[0], signal.SIGSTOP)
            stopped.append(pids[0])
        elif stopped:
            printed.append(capsys.readouterr().out)
            if "killed; it is replaced" in "".join(printed):
                raise KeyboardInterrupt  # why: what this test is about has happened

    # why: the stopped worker may not have beaten yet (the other one's update came first);
    # then the start allowance applies, here 30 s instead of 120 (START_TIMEOUT_S is tested
    # in test_reliability.py). 10 s for a started one: small enough for a test, large
    # enough that a loaded machine's slow steps are not taken for a hang.
    monkeypatch.setattr(process, "START_TIMEOUT_S", 30.0)
    config = small_config(algo="a3c", total_frames=10**8, max_seconds=150, actor_timeout_s=10.0,
                          log_interval_s=0.3)  # fmt: skip
    result = train(config, on_progress=stop_one)
    out = "".join(printed) + capsys.readouterr().out
    assert stopped and result.interrupted, out[-3000:]
    assert result.actor_restarts >= 1
    assert "gave no sign of life for" in out and "killed; it is replaced" in out
    assert not _alive(stopped[0])  # the stopped worker is gone, not left behind


def failing_check(fleet):
    """`Fleet.check` that raises once the workers have trained, as a Ray fleet's does once
    the parameter server actor is dead."""
    server = fleet.args[0]
    if server.step_count > 0:
        raise RuntimeError("the A3C parameter server died; the run cannot go on:\nTrace")


@pytest.mark.slow
def test_a_failed_fleet_check_ends_the_run_in_one_line_with_a_final_checkpoint(
    small_config, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(TaskFleet, "check", failing_check)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--algo", "a3c", "--env", "CartPole-v1", "--num-actors", "2",
              "--envs-per-actor", "2", "--unroll-length", "10", "--total-frames", "1e9",
              "--logdir", str(tmp_path), "--checkpoint-interval-s", "1000"])  # fmt: skip
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("gazelle train: error: the A3C workers' fleet failed: RuntimeError: ")
    assert "parameter server died" in err and "\n" not in err
    assert "Traceback" not in captured.out + captured.err
    state = checkpoint.load(tmp_path / "checkpoint.pt")  # the final one: no periodic save
    # the check failed once the server had a step; each step trains on T x E = 10 x 2 frames+
    assert state["updates"] >= 1 and state["frames"] >= 20 * state["updates"]


@pytest.mark.slow
def test_a_server_that_cannot_be_read_ends_the_run_and_keeps_the_last_checkpoint(
    small_config, tmp_path, monkeypatch, capsys
):
    """A dead parameter server (on Ray, `RayActorError` from every call) cannot give the
    final checkpoint its weights: the run says so in one line and keeps the last one."""
    frame_count = SharedAdamServer.frame_count
    saved = tmp_path / "checkpoint.pt"
    trained_since = []

    def dies_after_a_save(server):
        frames = frame_count.fget(server)
        if frames > 0 and not trained_since:
            trained_since.append(time.time())
        # why: a periodic checkpoint written after the first read of frames (a save reads
        # them right before it writes), so one with frames in it
        if trained_since and saved.exists() and saved.stat().st_mtime > trained_since[0]:
            raise ConnectionError("the server's process is gone")
        return frames

    monkeypatch.setattr(SharedAdamServer, "frame_count", property(dies_after_a_save))
    config = small_config(algo="a3c", total_frames=10**9, checkpoint_interval_s=1.0)
    with pytest.raises(RunStopped, match="the A3C parameter server failed: ConnectionError"):
        train(config)
    out = capsys.readouterr().out
    assert "warning: the final checkpoint failed: RunStopped: the A3C parameter server" in out
    assert "keeps the last one written" in out
    # written after the server had counted frames: one update's rollout, T x E = 10 x 2
    assert checkpoint.load(tmp_path / "checkpoint.pt")["frames"] >= 20


def test_a_runner_that_left_for_the_stop_is_a_stop_and_one_that_died_is_an_error():
    """The trainer looks at its runner thread while it waits for rollouts. A runner that
    left its loop because the run is stopping is a stop (the trainer once raised "the
    runner thread died" with no traceback then, and its process printed one at the end of
    a run: 1 run in 6 of the fleet-check test above); one that died says why."""
    import threading

    from gazelle.algorithms.a3c.worker import runner_gone

    left = threading.Thread(target=lambda: None)
    left.start()
    left.join()
    assert runner_gone(left, [], lambda: True) is True
    with pytest.raises(RuntimeError, match="left its loop while the run goes on"):
        runner_gone(left, [], lambda: False)
    with pytest.raises(RuntimeError, match="the runner thread died:\nTraceback: boom"):
        runner_gone(left, ["Traceback: boom"], lambda: True)
    release = threading.Event()
    running = threading.Thread(target=release.wait)
    running.start()
    try:
        assert runner_gone(running, [], lambda: True) is False
    finally:
        release.set()
        running.join()
