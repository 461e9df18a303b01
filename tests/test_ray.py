"""The Ray backend on a real local Ray cluster of two nodes on this machine (Ray's own
`cluster_utils`, loopback only): IMPALA learns, a killed actor is replaced without stopping
the run, A3C trains through its parameter-server actor, a run resumes from its checkpoint,
central inference serves the actors."""

from __future__ import annotations

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
    from gazelle.backends.ray.a3c import ParameterServerHost, RayParameterServer
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
    host = ray.remote(num_cpus=0)(ParameterServerHost).remote(agent, 1, 0.01, 1e-8, None)
    client = RayParameterServer(host)
    before = [p.detach().clone() for p in agent.parameters()]
    grads = [torch.ones_like(p) for p in agent.parameters()]
    assert client.push(grads, 0) == 1 and client.step_count == 1
    client.pull(agent)
    for old, new in zip(before, agent.parameters()):
        assert torch.allclose(new, old - 0.01, atol=1e-5)  # Adam's first step: lr * sign
    ray.kill(host)


def _probe(config: Config):
    from gazelle.algorithms.common import prepare

    prepared, found, _ = prepare(config)
    return found.obs_spec, prepared.model.torso, bool(prepared.model.use_lstm)


@pytest.mark.learning
def test_impala_on_ray_learns_cartpole_to_450(cluster, tmp_path):
    """The local backend's CartPole learning test, on the two-node Ray cluster."""
    config = Config.of(
        env="CartPole-v1", backend="ray", logdir=str(tmp_path), log_interval_s=10.0, seed=1,
        num_actors=2, total_frames=1_200_000,
    )  # fmt: skip
    start = time.monotonic()
    result = train(config)
    assert result.recent_return is not None and result.recent_return >= 450, (
        result,
        time.monotonic() - start,
    )


def test_a_private_instance_listens_on_loopback_only_without_dashboard():
    """`connect(None)` in a fresh interpreter (no test setting): every port Ray opens is on
    127.0.0.1, and no dashboard runs."""
    import sys

    code = (
        "import os, subprocess\n"
        "os.environ.pop('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER', None)\n"
        "from gazelle.backends.ray.cluster import connect\n"
        "assert connect(None)\n"
        "import ray\n"
        "print('node', ray.nodes()[0]['NodeManagerAddress'])\n"
        "print('dashboard', ray.get_runtime_context().get_node_id() and\n"
        "      ray._private.worker.global_worker.node.webui_url)\n"
        "ss = subprocess.run(['ss', '-ltnp'], capture_output=True, text=True).stdout\n"
        "ports = [l.split()[3] for l in ss.splitlines()[1:] if 'pid=%d' % os.getpid() in l\n"
        "         or 'raylet' in l or 'gcs_server' in l]\n"
        "print('ports', ports)\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["node"] == "127.0.0.1"
    assert lines["dashboard"] in ("None", "")
    ports = eval(lines["ports"])  # a printed list of "ADDR:PORT"
    assert ports and all("127.0.0.1" in p for p in ports), ports
