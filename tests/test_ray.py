"""The Ray backend on a real local Ray cluster of two nodes on this machine (Ray's own
`cluster_utils`, loopback only, token authentication on), joined by runs in this process:
IMPALA learns, a killed actor is replaced without stopping the run, A3C trains through its
parameter-server actor and resumes, central inference serves the actors. A private
instance started from the CLI, and clusters started with `ray start`: test_ray_private.py."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time

import pytest
import torch

from gazelle.algorithms import train
from gazelle.checkpoint import load
from gazelle.config import Config

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ray = pytest.importorskip("ray", reason="the ray tests need pip install -e '.[ray]'")


@pytest.fixture(scope="module")
def cluster(ray_token):
    """A head node and one worker node (2 CPUs each, as Ray counts them), on loopback."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    # why: Ray binds to a reachable address unless this is "0"; it is read at Ray's first
    # import, which conftest makes happen after it is set (see gazelle.backends.ray.cluster).
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0"
    head = {"num_cpus": 2, "include_dashboard": False, "_system_config": {"worker_niceness": 0}}
    nodes = Cluster(initialize_head=True, head_node_args=head)
    nodes.add_node(num_cpus=2)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, logging_level="WARNING")
    yield nodes
    ray.shutdown()
    nodes.shutdown()


@pytest.fixture
def small(small_config):
    """conftest's small CartPole run (`SMALL`), on the Ray backend."""
    return lambda **overrides: small_config(backend="ray", **overrides)


def rows(logdir) -> list[dict]:
    text = (logdir / "progress.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_the_cluster_has_two_nodes_on_loopback(cluster):
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 2
    assert {n["NodeManagerAddress"] for n in alive} == {"127.0.0.1"}


def test_a_run_in_a_process_already_connected_is_checked_and_left_as_it_is(cluster):
    """A run started in a process already connected to Ray (here: the fixture's cluster,
    with token authentication) keeps that connection and its settings: switching the
    process's mode under the live connection crashed Ray's clients (a check failure, the
    whole process gone). It is checked as a joined cluster is: asked whether it answers
    without a token (it does not), so the run goes on."""
    from gazelle.backends.ray import cluster as private
    from gazelle.backends.ray.probe import answers_without_token

    mode, token = os.environ.get(private.AUTH_ENV), private.token_auth_on()
    assert token  # the fixture's cluster: token authentication on
    assert answers_without_token(cluster.address) is False
    assert private.connect(None) is False
    assert os.environ.get(private.AUTH_ENV) == mode and private.token_auth_on() is token


def test_impala_trains_on_ray_and_uses_both_nodes(cluster, small, tmp_path):
    result = train(small(total_frames=3000))
    assert result.frames >= 3000 and result.episodes > 0 and result.actor_restarts == 0
    assert result.updates == result.frames // 40
    last = rows(tmp_path)[-1]
    assert last["charts/policy_lag"] >= 0 and "ray/get_ms_per_unroll" in last


def test_a_killed_actor_process_is_replaced_and_training_goes_on(cluster, small, tmp_path):
    killed: list[int] = []

    def kill_one(progress: dict) -> None:
        if killed or progress["frames"] < 1500:
            return
        out = subprocess.run(["pgrep", "-f", "ray::ActorHost"], capture_output=True, text=True)
        pids = [int(p) for p in out.stdout.split()]
        assert pids, "no Ray actor process found"
        os.kill(pids[0], signal.SIGKILL)
        killed.append(pids[0])

    result = train(small(total_frames=8000), on_progress=kill_one)
    assert killed, "the run ended before an actor could be killed"
    assert result.frames >= 8000 and result.actor_restarts >= 1
    logged = [r.get("charts/actor_restarts", 0) for r in rows(tmp_path)]
    assert max(logged) >= 1
    # why: the run did not stall on the dead actor: frames kept coming after the kill.
    after = [r["frames"] for r in rows(tmp_path) if r.get("charts/actor_restarts", 0) >= 1]
    assert after[-1] - after[0] >= 2000


def test_a_silent_or_failing_ray_actor_stops_its_heartbeat_within_the_timeout(cluster):
    from gazelle.backends.ray.health import Heartbeat
    from gazelle.errors import RunError

    @ray.remote(num_cpus=0)
    class Server:
        def __init__(self) -> None:
            self.mode = "ok"

        def set(self, mode: str) -> None:
            self.mode = mode

        def stats(self) -> dict:
            if self.mode == "raise":
                raise ValueError("broken")
            if self.mode == "sleep":
                time.sleep(60)
            return {"batches": 1}

    for mode, message in [("sleep", "gave no answer for"), ("raise", "failed: .*broken")]:
        server = Server.options(max_concurrency=2).remote()
        watch = Heartbeat(server, "stats", "test server", timeout_s=2.0)
        deadline = time.monotonic() + 20
        while watch.last is None:  # healthy: answers come back, nothing raises
            watch.check()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ray.get(server.set.remote(mode))
        start = time.monotonic()
        with pytest.raises(RunError, match=f"^the test server {message}"):
            while time.monotonic() - start < 20:
                watch.check()
                time.sleep(0.05)
        assert time.monotonic() - start < 10
        watch.forget()
        ray.kill(server)


def test_a_stopped_ray_inference_server_stops_the_run_in_one_line(cluster, small, tmp_path):
    """SIGSTOP the central inference server mid-run: the run stops within the timeout with
    a one-line reason (and its checkpoint), instead of waiting forever."""
    from gazelle.errors import RunError

    stopped: list[int] = []

    def stop_server(progress: dict) -> None:
        if stopped or progress["frames"] < 1000:
            return
        out = subprocess.run(["pgrep", "-f", "ray::InferenceHost"], capture_output=True, text=True)
        pids = [int(p) for p in out.stdout.split()]
        assert pids, "no inference server process found"
        os.kill(pids[0], signal.SIGSTOP)
        stopped.append(pids[0])

    config = small(inference="central", actor_timeout_s=5.0, total_frames=10**8, max_seconds=90)
    start = time.monotonic()
    try:
        with pytest.raises(RunError, match="central inference server gave no answer"):
            train(config, on_progress=stop_server)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert stopped and time.monotonic() - start < 80
    assert (tmp_path / "checkpoint.pt").exists()


def test_central_inference_on_ray_serves_the_actors(cluster, small, tmp_path):
    config = small(total_frames=2000, inference="central", use_lstm=True, envs_per_actor=4)
    result = train(config.replace(env_groups=2))
    assert result.frames >= 2000 and result.actor_restarts == 0
    batches = [r["charts/inference_batch"] for r in rows(tmp_path) if "charts/inference_batch" in r]
    assert batches and all(b >= 2 for b in batches)  # at least one env group's envs per batch


def test_a3c_on_ray_updates_the_parameter_server_and_resumes(cluster, tmp_path):
    from gazelle.algorithms.a3c.shared_adam import SharedAdamServer
    from gazelle.backends.ray.param_server import ParameterServerHost, RayParameterServer
    from gazelle.models import build_agent

    config = Config.of(
        algo="a3c", env="CartPole-v1", backend="ray", num_actors=2, total_frames=6000,
        log_interval_s=0.5, logdir=str(tmp_path),
    )  # fmt: skip
    result = train(config)
    assert result.frames >= 6000 and result.updates > 0
    saved = load(tmp_path / "checkpoint.pt")
    assert int(saved["optimizer"]["steps"].sum()) == result.updates
    # resume: the server starts from the checkpoint's weights, moments and counters
    again = train(config.replace(total_frames=9000))
    assert again.frames >= 9000 and again.updates > result.updates
    resumed = load(tmp_path / "checkpoint.pt")
    assert int(resumed["optimizer"]["steps"].sum()) == again.updates
    assert int(resumed["frames"]) == again.frames
    frames = [r["frames"] for r in rows(tmp_path)]
    assert frames == sorted(frames)  # the second run went on from the first's frames
    # and a server actor applies a push: one step, weights changed by Adam's first step
    agent = build_agent(*_probe(config), init="seed")
    store = functools.partial(SharedAdamServer, num_workers=1, lr=0.01, eps=1e-8)
    host = ray.remote(num_cpus=0)(ParameterServerHost).remote(agent, store)
    client = RayParameterServer(host)
    before = [p.detach().clone() for p in agent.parameters()]
    grads = [torch.ones_like(p) for p in agent.parameters()]
    assert client.push(grads, 0) == 1 and client.step_count == 1
    client.pull(agent)
    for old, new in zip(before, agent.parameters()):
        assert torch.allclose(new, old - 0.01, atol=1e-5)  # Adam's first step: lr * sign
    ray.kill(host)


def test_a_stopped_a3c_worker_on_ray_is_replaced_and_training_goes_on(cluster, tmp_path, capsys):
    """SIGSTOP one A3C worker's process: its drain goes unanswered, it is found hung within
    --actor-timeout-s, killed and replaced; the other worker trains on meanwhile (no poll
    waits on the stopped one)."""
    stopped: list[int] = []
    seen: dict[str, int] = {}
    printed: list[str] = []

    def stop_a_worker(progress: dict) -> None:
        if not stopped and progress["frames"] >= 2000:
            out = subprocess.run(["pgrep", "-f", "ray::WorkerHost"], capture_output=True, text=True)
            pids = [int(p) for p in out.stdout.split()]
            assert pids, "no A3C worker process found"
            os.kill(pids[0], signal.SIGSTOP)
            stopped.append(pids[0])
            seen["at_stop"] = progress["frames"]
        elif stopped:
            seen["last"] = progress["frames"]
            printed.append(capsys.readouterr().out)
            # why: done once the stopped worker was found and frames kept coming past it
            if (
                "gave no sign of life" in "".join(printed)
                and seen["last"] - seen["at_stop"] >= 4000
            ):
                raise KeyboardInterrupt

    config = Config.of(
        algo="a3c", env="CartPole-v1", backend="ray", num_actors=2, total_frames=10**8,
        max_seconds=60, actor_timeout_s=5.0, log_interval_s=0.5, logdir=str(tmp_path),
    )  # fmt: skip
    try:
        result = train(config, on_progress=stop_a_worker)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    out = "".join(printed) + capsys.readouterr().out
    assert stopped, "the run ended before a worker could be stopped"
    assert result.actor_restarts >= 1 and "gave no sign of life" in out, out[-3000:]
    assert seen["last"] - seen["at_stop"] >= 2000  # frames kept coming


def test_a_stopped_ray_actor_is_replaced_and_training_goes_on(cluster, small, tmp_path, capsys):
    """SIGSTOP an IMPALA actor's Ray process: no unroll comes back from it for
    --actor-timeout-s, so it is killed as hung and replaced; the other actor trains on."""
    stopped: list[int] = []

    def stop_one(progress: dict) -> None:
        if stopped or progress["frames"] < 1500:
            return
        out = subprocess.run(["pgrep", "-f", "ray::ActorHost"], capture_output=True, text=True)
        pids = [int(p) for p in out.stdout.split()]
        assert pids, "no Ray actor process found"
        os.kill(pids[0], signal.SIGSTOP)
        stopped.append(pids[0])

    try:
        result = train(small(total_frames=12000, actor_timeout_s=5.0), on_progress=stop_one)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    out = capsys.readouterr().out
    assert stopped and result.frames >= 12000
    assert result.actor_restarts >= 1 and "gave no sign of life" in out, out[-3000:]


def test_a_stopped_a3c_parameter_server_on_ray_stops_the_run_in_one_line(cluster, tmp_path, capsys):
    """SIGSTOP A3C's parameter-server actor (past 2,000 frames, once a periodic checkpoint
    holds frames): every call to it is bounded, so the run stops with one line naming it
    within --actor-timeout-s; the final checkpoint cannot read the server (one line says
    so) and the last periodic one stays, with the frames it had."""
    from gazelle.errors import RunError

    stopped: list[int] = []
    frames_at_stop: list[int] = []

    def stop_server(progress: dict) -> None:
        if stopped or progress["frames"] < 2000:
            return
        # why: the server is stopped once a periodic checkpoint holds frames (on an idle box
        # the run passed 2,000 frames before the first save after the workers' start, and
        # the checkpoint kept was the one of frame 0, which says nothing of what is kept).
        saved = tmp_path / "checkpoint.pt"
        if not saved.exists() or int(load(saved)["frames"]) == 0:
            return
        frames_at_stop.append(progress["frames"])
        out = subprocess.run(
            ["pgrep", "-f", "ray::ParameterServerHost"], capture_output=True, text=True
        )
        pids = [int(p) for p in out.stdout.split()]
        assert pids, "no parameter server process found"
        os.kill(pids[0], signal.SIGSTOP)
        stopped.append(pids[0])

    config = Config.of(
        algo="a3c", env="CartPole-v1", backend="ray", num_actors=2, total_frames=10**8,
        max_seconds=120, actor_timeout_s=5.0, log_interval_s=0.5, logdir=str(tmp_path),
        checkpoint_interval_s=1.0,
    )  # fmt: skip
    start = time.monotonic()
    try:
        with pytest.raises(RunError, match="A3C parameter server") as error:
            train(config, on_progress=stop_server)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert stopped and time.monotonic() - start < 100
    assert "\n" not in str(error.value)
    out = capsys.readouterr().out
    assert "warning: the final checkpoint failed" in out and "keeps the last one" in out, out
    kept = load(tmp_path / "checkpoint.pt")  # the last periodic one, readable
    assert 0 < int(kept["frames"]) <= frames_at_stop[0] + 2000


def _probe(config: Config):
    from gazelle.algorithms.common import prepare

    prepared, found, _ = prepare(config)
    return found.obs_spec, prepared.model.torso, bool(prepared.model.use_lstm)


@pytest.mark.learning
def test_impala_on_ray_learns_cartpole_to_450(cluster, tmp_path):
    """The local backend's CartPole learning test, on the two-node Ray cluster: a 100-episode
    mean of 450 within 1M frames (the run stops once there, `target_return`)."""
    config = Config.of(
        env="CartPole-v1", backend="ray", logdir=str(tmp_path), log_interval_s=10.0, seed=1,
        num_actors=2, total_frames=1_000_000, target_return=450.0,
    )  # fmt: skip
    start = time.monotonic()
    result = train(config)
    assert result.target_reached_at is not None, (  # a full window's mean of 450
        result,
        time.monotonic() - start,
    )


def test_an_actor_that_crashes_again_and_again_slows_down_then_stops_the_run(cluster, tmp_path):
    """A Ray actor that cannot start (its env does not exist where it runs) crashes each
    time it is replaced: each replacement waits twice as long as the one before, and once
    the budget is spent the fleet stops the run with one line naming the actor and its last
    reason. (The budget is the fleet's own argument: 3 within the window, backoff up to 2 s
    here, instead of 10 and 60 s; and the stop after constructor failures in a row, below,
    is off.)"""
    import dataclasses

    from gazelle.algorithms.common import prepare
    from gazelle.algorithms.impala.build import actor_specs
    from gazelle.backends.ray.fleet import RayFleet
    from gazelle.backends.ray.params import RayParams
    from gazelle.errors import RunError
    from gazelle.models import build_agent
    from gazelle.runtime.restarts import RestartBudget

    small = Config.of(
        env="CartPole-v1", num_actors=1, envs_per_actor=1, batch_size=1, backend="ray",
        logdir=str(tmp_path),
    )  # fmt: skip
    config, found, _ = prepare(small)
    # why: env_target (what the probe resolved) would make the real env; none: the level
    spec = dataclasses.replace(actor_specs(config, found)[0], level="NoSuchEnv-v0", env_target=None)
    params = RayParams()
    params.publish(build_agent(found.obs_spec, "mlp", False), 0)
    fleet = RayFleet(
        [spec], params, 1, actor_timeout_s=30.0,
        budget=lambda name: RestartBudget(name, max_restarts=3, max_backoff_s=2.0),
        max_init_failures=None,
    )  # fmt: skip
    restarts: list[dict] = []
    waiting: list[str] = []  # what the fleet says of the actor right after each restart
    fleet.start()
    start = time.monotonic()
    try:
        with pytest.raises(RunError, match=r"^actor 0 was replaced 3 times .*; giving up$"):
            while time.monotonic() - start < 180:
                new = [e for e in fleet.poll() if e["type"] == "actor_restart"]
                if new:
                    restarts += new
                    waiting.append(fleet.describe())
                time.sleep(0.05)
    finally:
        fleet.close()
    assert [event["backoff_s"] for event in restarts] == [0.0, 1.0, 2.0], restarts
    # during a wait the actor has no process: its replacement starts after the backoff
    assert all("backing off before its replacement" in said for said in waiting[1:]), waiting


def test_an_actor_that_cannot_be_created_stops_the_run_in_seconds_naming_the_cause(
    cluster, small, tmp_path
):
    """An env the cluster's workers cannot make (here: registered from this test module,
    which they cannot import) fails every actor's constructor the same way. The run stops
    after MAX_INIT_FAILURES such failures in a row, with the cause's line, instead of
    waiting out the restart budget's backoffs (10 restarts, minutes)."""
    import gazelle
    from gazelle.backends.ray.fleet import MAX_INIT_FAILURES
    from gazelle.errors import RunError

    gazelle.register_env("gazelle-test/OnlyHere-v0", _cartpole_made_here)
    start = time.monotonic()
    with pytest.raises(RunError) as error:
        train(small(env="gazelle-test/OnlyHere-v0", num_actors=1, total_frames=3000))
    said = str(error.value)
    assert f"could not be created {MAX_INIT_FAILURES} times in a row" in said, said
    assert "No module named 'test_ray'" in said, said
    assert time.monotonic() - start < 90


def _cartpole_made_here(**kwargs):
    import gymnasium

    return gymnasium.make("CartPole-v1", **kwargs)


def _gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_suite_on_ray_runs_side_by_side_as_tasks_and_a_dead_task_fails_alone(
    cluster, tmp_path, capsys
):
    """`gazelle suite --suite-backend ray` joined to the two-node cluster: its two runs (a
    minutes budget of 0.1: each stopped with SIGINT at 6 s of training) are Ray tasks of
    --num-actors + 1 = 2 CPUs, one per node, at the same time. One task's Ray worker is
    killed mid-run: that run alone is reported failed, and its guard gave it SIGINT, so it
    saved a checkpoint and exited; the other run finishes at its budget. The report reads
    the files the local path writes, and a second pass runs nothing (one run done, one
    failed: neither run again)."""
    import threading

    from gazelle.suite import SuiteSpec, run_suite, write_report
    from gazelle.suite.pairs import command_line, pairs, read_rows, read_status

    spec = SuiteSpec(
        name="CartPole-v1", games=("CartPole-v1",), seeds=(1, 2), frames=None, minutes=0.1,
        out=tmp_path / "suite", train_args=("--num-actors", "1", "--log-interval-s", "0.5"),
        scores={"CartPole-v1": (22.0, 500.0)}, backend="ray", run_cpus=2.0,
    )  # fmt: skip
    one, two = pairs(spec)
    killed: list[int] = []

    def kill_the_worker_of_seed_2() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            worker = read_status(two).get("where", {}).get("ray_worker_pid")
            if worker and read_rows(two.logdir):  # training: its SIGINT handler is set
                os.kill(worker, signal.SIGKILL)
                killed.append(worker)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_worker_of_seed_2, daemon=True)
    killer.start()
    counts = run_suite(spec)
    killer.join(timeout=1)
    said = capsys.readouterr().out
    assert killed, "seed 2's run never started training"
    assert counts == {"done": 1, "failed": 1}, (counts, said)
    assert "2 runs as Ray tasks of 2 CPUs and 0 GPUs each, 2 at once on the cluster" in said
    first, second = read_status(one), read_status(two)
    # each a Ray task in a Ray worker of its own node, both at the same time
    assert first["where"]["ray_task"] != second["where"]["ray_task"]
    assert os.getpid() not in (first["where"]["ray_worker_pid"], killed[0])
    assert second["where"]["ray_worker_pid"] == killed[0]
    assert first["where"]["ray_node_id"] != second["where"]["ray_node_id"]
    assert first["started_at"] < second["ended_at"] and second["started_at"] < first["ended_at"]
    # the minutes budget: stopped with SIGINT once a row said 6 s of training, and done
    assert first["status"] == "done" and first["returncode"] == 0
    assert 6.0 <= read_rows(one.logdir)[-1]["time"] < 60.0
    assert second["status"] == "failed", second
    assert "its Ray task died (WorkerCrashedError" in second["error"]
    deadline = time.monotonic() + 60  # why: its guard's SIGINT makes it save, then exit
    while not _gone(second["where"]["run_pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(second["where"]["run_pid"]), "the dead task's run was left running"
    log = two.log_path.read_text()
    assert log.count("gazelle: interrupted; saving a checkpoint") == 1, log
    assert "\ndone: " in log and (two.logdir / "checkpoint.pt").is_file()  # saved: resumable
    report = write_report(spec, "gazelle suite ...", figure=False)
    for run, pair in zip(report["runs"], (one, two)):  # the local path's commands and files
        assert run["command"] == command_line(spec, pair) == read_status(pair)["command"]
        assert run["command"].endswith("# stopped (SIGINT) after 0.1 minutes of training")
        assert run["logdir"] == str(spec.out / "CartPole-v1" / f"seed-{pair.seed}")
    assert report["per_game"]["CartPole-v1"]["not_scored"] == {"2": "failed"}
    assert report["aggregate"]["games"] == ["CartPole-v1"] and report["aggregate"]["runs"] == 1
    assert (spec.out / "report.md").is_file()
    assert not list(spec.out.glob(".visible-*"))  # the driver's marker is removed

    logs = [pair.log_path.read_bytes() for pair in (one, two)]
    assert run_suite(spec) == {"skipped": 2}  # done, and failed (no --retry-failed)
    assert [pair.log_path.read_bytes() for pair in (one, two)] == logs
    assert read_status(two)["where"]["ray_task"] == second["where"]["ray_task"]


def test_a_node_that_does_not_see_the_suite_folder_stops_the_suite_naming_both(cluster, tmp_path):
    """A task whose node does not see the driver's marker in OUT (a node with its own
    folder at that path: OUT not on a shared filesystem) runs nothing, and the driver stops
    the suite with one line naming OUT and the node."""
    from gazelle.errors import RunError
    from gazelle.suite import SuiteSpec
    from gazelle.suite.on_ray import _finish, run_task
    from gazelle.suite.pairs import pairs

    spec = SuiteSpec(
        name="CartPole-v1", games=("CartPole-v1",), seeds=(1,), frames=100, minutes=None,
        out=tmp_path, backend="ray",
    )  # fmt: skip
    pair = pairs(spec)[0]
    ref = ray.remote(run_task).options(num_cpus=0.1).remote(spec, pair, ".visible-elsewhere")
    with pytest.raises(RunError) as error:
        _finish(ray, spec, ref, "[1/1]", pair, {})
    said = str(error.value)
    assert f"the suite's directory {tmp_path} is not visible from Ray node 127.0.0.1" in said
    assert "\n" not in said and "docs/suite.md" in said
    assert not pair.status_path.exists() and not pair.logdir.exists()  # nothing ran


def test_pbt_makes_a_member_that_cannot_learn_take_over_the_better_members_checkpoint(
    cluster, tmp_path
):
    """`gazelle tune` (its flags, then `run_tune`) joined to the two-node loopback cluster:
    two members on CartPole, synchronous PBT at 1,200 frames of 2,000. member-1 starts with
    a learning rate that cannot learn (1e-7) and member-0 with 0.01. At the interval
    member-1, the bottom, copies member-0: it resumes (gazelle's resume, in a new run
    folder) from the very file member-0 reported (its sha256; gazelle keeps it as the run's
    `checkpoint.pt.prev` when it saves the next), at member-0's frame count, with member-0's
    values explored within bounds; its return afterwards is member-0's level, not its own.
    Ray Tune's own logs (`pbt_global.txt`) record the same exploit."""
    from gazelle.cli import build_parser
    from gazelle.tune import run_tune
    from gazelle.tune.flags import spec_from_args
    from gazelle.tune.member import read_journal, sha256

    pytest.importorskip("ray.tune", reason="needs pip install -e '.[tune]'")
    argv = [
        "tune", "--population", "2", "--frames", "2000", "--interval", "1200", "--synch",
        "--out", str(tmp_path / "pbt"), "--mutate", "learning_rate=1e-8:0.05",
        "--start", "learning_rate=0.01,1e-7", "--resample-probability", "0",
        "--member-cpus", "1", "--num-actors", "1", "--envs-per-actor", "4",
        "--batch-size", "4", "--unroll-length", "10", "--log-interval-s", "0.05",
    ]  # fmt: skip
    spec = spec_from_args(build_parser().parse_args(argv), argv[1:])
    summary = run_tune(spec)
    members = summary["members"]
    assert [m["status"] for m in members.values()] == ["done", "done"], members
    good, bad = (read_journal(tmp_path / "pbt" / "members" / n) for n in members)
    assert not any(e["event"] == "exploit" for e in good)
    [exploit] = [e for e in bad if e["event"] == "exploit"]
    donor = [e for e in good if e["event"] == "report" and e["frames"] == exploit["frames"]]
    assert exploit["copied"] == "member-0" and len(donor) == 1  # its report at the interval
    assert 1200 <= exploit["frames"] < 2000 and 1200 <= exploit["own_frames"] < 2000
    # the very checkpoint member-0 reported, resumed by gazelle in member-1's new run folder
    run = tmp_path / "pbt" / "members" / "member-1" / "run-1"
    assert exploit["copied_sha256"] == donor[0]["sha256"] == sha256(run / "checkpoint.pt.prev")
    assert (
        f"resumed from {run / 'checkpoint.pt'} at {exploit['frames']:,} frames"
        in (run.parent / "console.log").read_text()
    )
    assert (
        json.loads((run / "progress.jsonl").read_text().splitlines()[0])["frames"]
        > (exploit["frames"])
    )  # continued from member-0's frames, not from 0 nor its own
    # explored from member-0's values (x0.8 or x1.2: no resampling here), within bounds
    assert exploit["own_values"]["learning_rate"] == 1e-7
    assert exploit["values"]["learning_rate"] in (pytest.approx(0.008), pytest.approx(0.012))
    # its return: member-0's level at the copy, not its own before it
    reports = [e["episode_return"] for e in bad if e["event"] == "report"]
    own_before, after, donor_level = reports[0], reports[-1], donor[0]["episode_return"]
    assert donor_level > own_before + 3, (donor_level, own_before)  # the setup: one is better
    assert abs(after - donor_level) < abs(after - own_before), (after, donor_level, own_before)
    assert members["member-1"]["schedule"][1]["source"].startswith("copied member-0 at ")
    # Ray Tune's own record of it
    [line] = (tmp_path / "pbt" / "ray" / "pbt_global.txt").read_text().splitlines()
    assert json.loads(line)[:2] == ["1_start_member=1", "0_start_member=0"], line
    assert (tmp_path / "pbt" / "curves.png").is_file()


def test_a_population_stopped_with_ctrl_c_is_continued_by_the_same_command(cluster, tmp_path):
    """`gazelle tune` as a user runs it (a process of its own, joined to the loopback
    cluster): Ctrl-C once both members reported stops it with exit 1 and the line that says
    how to go on. A changed flag is then refused in one line, with nothing run. The same
    command continues it: each unfinished member resumes in its own run folder (gazelle's
    resume) from a report it made before Ctrl-C, never from frame 0, a finished one is not
    run again, and both reach the budget."""
    import shutil
    import sys

    from gazelle.tune.member import read_journal

    pytest.importorskip("ray.tune", reason="needs pip install -e '.[tune]'")
    out = tmp_path / "pop"
    gazelle = [shutil.which("gazelle") or sys.executable]
    gazelle += [] if shutil.which("gazelle") else ["-m", "gazelle.cli"]
    argv = [
        *gazelle, "tune", "--ray-address", cluster.address, "--population", "2",
        "--frames", "3000", "--interval", "1000", "--quantile", "0", "--out", str(out),
        "--start", "learning_rate=0.01,0.001", "--member-cpus", "1", "--env", "CartPole-v1",
        "--num-actors", "1", "--envs-per-actor", "4", "--batch-size", "4",
        "--unroll-length", "10", "--log-interval-s", "0.05",
    ]  # fmt: skip
    homes = [out / "members" / f"member-{i}" for i in (0, 1)]
    first = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 180
    while not all(any(e["event"] == "report" for e in read_journal(h)) for h in homes):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0][-3000:]
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    said = first.communicate(timeout=120)[0]
    assert first.returncode == 1, said[-3000:]
    assert "the population stopped before its end; the same command continues it" in said
    before = [read_journal(h) for h in homes]
    refused = subprocess.run([*argv, "--unroll-length", "20"], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--unroll-length: invalid value 20; allowed: 10, as the population in" in refused.stderr
    assert [read_journal(h) for h in homes] == before  # nothing ran
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, (again.stdout[-3000:], again.stderr[-3000:])
    assert f"continuing the population in {out}" in again.stdout
    resumed = 0
    for home, old in zip(homes, before, strict=True):
        events = read_journal(home)
        new = events[len(old) :]
        assert events[: len(old)] == old and [e["event"] for e in events].count("start") == 1
        if old[-1]["event"] == "report" and old[-1]["frames"] >= 3000:
            assert new == [], new  # it had finished before Ctrl-C: not run again
            continue
        reported = {e["frames"] for e in old if e["event"] == "report"}
        assert new[0]["event"] == "resume" and new[0]["frames"] in reported, new[0]
        assert new[0]["run"] == "run-0" and new[-1]["event"] == "report"
        assert new[-1]["frames"] >= 3000
        said = f"resumed from {home / 'run-0' / 'checkpoint.pt'} at {new[0]['frames']:,} frames"
        assert said in (home / "console.log").read_text()
        resumed += 1
    assert resumed >= 1
    summary = json.loads((out / "summary.json").read_text())
    assert [m["status"] for m in summary["members"].values()] == ["done", "done"]


def _learner_actor_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "ray::LearnerHost"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_two_learners_on_ray_step_as_one_listening_on_loopback(cluster, tmp_path, monkeypatch):
    """`--learners 2 --backend ray`: learner 1 is a Ray actor (placed by Ray) and the driver
    learner 0; with half the batch each they take the steps one learner takes with all of it
    (test_learners.py's four batches: V-trace with the LSTM, a clip that bites, a skipped
    non-finite batch), and on this loopback cluster the rendezvous and gloo listen on
    127.0.0.1 only."""
    from gazelle.backends.ray.sockets import is_loopback, listening, tree
    from test_learners import CASES, check_equivalence, one_and_two

    with one_and_two(tmp_path, monkeypatch, backend="ray", **CASES["impala-vtrace-lstm"]) as parts:
        learners = parts[4].learners
        assert type(learners).__name__ == "RayLearners" and not learners.owns_ray
        pid = int(learners.where[1][0])
        assert _learner_actor_pids() == [pid] and pid in tree(os.getpid())  # a Ray worker
        check_equivalence(*parts)
        # the store (the driver's) and gloo's sockets (both learners'), as /proc shows them
        found = listening({os.getpid(), pid})
        assert {s.pid for s in found} == {os.getpid(), pid}, found
        assert all(is_loopback(s.host) for s in found), found


def test_a_killed_ray_learner_stops_the_run_in_one_line_and_its_checkpoint_resumes(
    cluster, small, tmp_path, capsys
):
    """`--learners 2 --backend ray` trains APPO (two epochs of two minibatches: the
    equivalence test above is IMPALA's); SIGKILL of learner 1's Ray actor stops the run
    within seconds with one line naming it, and the checkpoint it leaves resumes with one
    learner."""
    from gazelle.backends.collective import LearnerLost

    killed: list[tuple[int, float]] = []

    def kill_learner(progress: dict) -> None:
        if killed or progress["frames"] < 1500 or not (tmp_path / "checkpoint.pt").exists():
            return
        pids = _learner_actor_pids()
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        killed.append((pids[0], time.monotonic()))

    config = small(
        algo="appo", epochs=2, minibatches=2, learners=2, total_frames=10**7, max_seconds=60,
        checkpoint_interval_s=0.5,
    )  # fmt: skip
    with pytest.raises(LearnerLost) as caught:
        train(config, on_progress=kill_learner)
    assert killed, "the run ended before learner 1 could be killed"
    took = time.monotonic() - killed[0][1]
    said = str(caught.value)
    assert f"learner 1 (pid {killed[0][0]} on 127.0.0.1) died" in said and "\n" not in said
    assert took < 15, took
    assert not _learner_actor_pids()  # nothing left behind
    saved = int(load(tmp_path / "checkpoint.pt")["frames"])
    assert saved >= 1500
    capsys.readouterr()
    result = train(config.replace(learners=1, total_frames=saved + 200, max_seconds=None))
    assert f"at {saved:,} frames" in capsys.readouterr().out
    assert result.frames >= saved + 200
