"""The Ray backend on a real local Ray cluster of two nodes on this machine (Ray's own
`cluster_utils`, loopback only): IMPALA learns, a killed actor is replaced without stopping
the run, A3C trains through its parameter-server actor, a run resumes from its checkpoint,
central inference serves the actors."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from gazelle.algorithms import train
from gazelle.checkpoint import load
from gazelle.config import Config

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ray = pytest.importorskip("ray", reason="the ray tests need pip install -e '.[ray]'")


@pytest.fixture(scope="module")
def cluster():
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


def test_a_run_in_a_process_already_connected_leaves_its_ray_as_it_is(cluster):
    """The test cluster runs without token authentication: a run started in this process
    joins it as it is. Switching the process's mode to token under the live connection
    crashed Ray's clients (a check failure, the whole process gone) on a machine without
    ~/.ray/auth_token."""
    from gazelle.backends.ray import cluster as private

    mode, token = os.environ.get(private.AUTH_ENV), private.token_auth_on()
    assert not token  # the fixture's cluster: no token
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


def test_a_ray_run_resumes_from_its_checkpoint(cluster, small, tmp_path):
    first = train(small(total_frames=2000))
    saved = load(tmp_path / "checkpoint.pt")
    assert saved["frames"] == first.frames
    second = train(small(total_frames=4000))
    assert second.frames >= 4000
    assert second.updates == first.updates + (second.frames - first.frames) // 40


def test_central_inference_on_ray_serves_the_actors(cluster, small, tmp_path):
    result = train(small(total_frames=2000, inference="central", use_lstm=True))
    assert result.frames >= 2000 and result.actor_restarts == 0
    batches = [r["charts/inference_batch"] for r in rows(tmp_path) if "charts/inference_batch" in r]
    assert batches and all(b >= 2 for b in batches)  # at least one actor's envs per batch


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


def test_a_stopped_a3c_parameter_server_on_ray_stops_the_run_in_one_line(cluster, tmp_path):
    """SIGSTOP A3C's parameter-server actor: every call to it is bounded, so the run stops
    with one line naming it within --actor-timeout-s (and keeps its last checkpoint)."""
    from gazelle.errors import RunError

    stopped: list[int] = []

    def stop_server(progress: dict) -> None:
        if stopped or progress["frames"] < 2000:
            return
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


def _descendants(root: int) -> set[int]:
    """`root` and every process below it (from /proc: pid -> parent pid)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, grew = {root}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in found}
        grew = not below <= found
        found |= below
    return found


def _listening(pids: set[int]) -> list[str]:
    """`ADDR:PORT` of every listening TCP socket owned by one of `pids` (`ss -ltnp`)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    return [
        line.split()[3] for line in out.splitlines() if any(f"pid={pid}," in line for pid in pids)
    ]


def _clean_env() -> dict[str, str]:
    """A user's shell: no variable of conftest's or Ray's."""
    keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ}


def test_a_private_run_from_the_cli_listens_on_loopback_only(tmp_path):
    """`gazelle train --backend ray` as a user starts it (no --ray-address, an environment
    without conftest's settings): every listening socket of the run's processes (the
    driver, Ray's GCS, raylet and workers) is on loopback while it trains, and it ends
    with a checkpoint."""
    import shutil
    import sys

    from gazelle.backends.ray.cluster import is_loopback

    gazelle = shutil.which("gazelle")
    command = [gazelle] if gazelle else [sys.executable, "-m", "gazelle.cli"]
    args = ["train", "--backend", "ray", "--env", "CartPole-v1", "--num-actors", "1",
            "--envs-per-actor", "2", "--batch-size", "2", "--total-frames", "10000000",
            "--log-interval-s", "1", "--logdir", str(tmp_path / "run")]  # fmt: skip
    run = subprocess.Popen(
        command + args, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, text=True,
    )  # fmt: skip
    try:
        progress = tmp_path / "run" / "progress.jsonl"
        deadline = time.monotonic() + 240
        while not (progress.exists() and progress.read_text().strip()):
            assert run.poll() is None, run.stdout.read() if run.stdout else ""
            assert time.monotonic() < deadline, "no progress row in 240 s"
            time.sleep(1)
        sockets = _listening(_descendants(run.pid))
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)
        output, _ = run.communicate(timeout=120)
    assert len(sockets) >= 3, (sockets, output[-2000:])  # the driver, the GCS, the raylet
    exposed = [s for s in sockets if not is_loopback(s.rsplit(":", 1)[0])]
    assert not exposed, (exposed, sockets)
    assert run.returncode == 0, output[-2000:]
    assert (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_private_instance_is_private_whatever_was_imported_first():
    """`connect(None)` in a fresh interpreter that imported Ray first, with an environment
    that asks Ray for a reachable address and no token: every port Ray opens is still on
    127.0.0.1, token authentication is on, and no dashboard runs."""
    import sys

    code = (
        "import os, subprocess\n"
        "import ray  # first, before gazelle could set anything\n"
        "from gazelle.backends.ray.cluster import connect, token_auth_on\n"
        "assert connect(None)\n"
        "print('node', ray.nodes()[0]['NodeManagerAddress'])\n"
        "print('token', token_auth_on())\n"
        "print('dashboard', ray._private.worker.global_worker.node.webui_url)\n"
        "ray.shutdown()\n"
    )
    env = {**_clean_env(), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_AUTH_MODE": "disabled"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["node"] == "127.0.0.1"
    assert lines["token"] == "True"
    assert lines["dashboard"] in ("None", "")
