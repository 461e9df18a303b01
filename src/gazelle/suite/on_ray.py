"""`--suite-backend ray`: the suite's runs as Ray tasks, side by side, placed by Ray.

    gazelle suite (driver) --one task per pair--> Ray --places it on a node--> run_pair
        (the ordinary `gazelle train` in a subprocess there, its files under OUT)

The driver joins the cluster `--suite-ray-address` names, or starts a private Ray instance
on this machine, with the code and checks of `gazelle train --backend ray`
(`gazelle.backends.ray.cluster.connect`: loopback, token, a 0700 session folder, the
sockets read back). Each task asks for a run's CPUs and GPUs (`resources`); Ray runs as
many as fit at once and queues the rest. Ray never retries a task: one that dies (its
worker or its node lost) is reported failed and the others go on; its run got SIGINT
(`runner.ORPHAN_GUARD`) and saved, so `--retry-failed` resumes it.

Where the files live: a task runs its pair with the logdir under OUT, as the local path
does, so OUT must be the same folder on every node: this machine's on a one-machine
cluster, a shared filesystem mounted at the same path on a multi-machine one. Each task
first checks that it sees OUT (a marker file the driver writes, with a new name each pass);
a node that does not see it stops the suite with one line naming OUT and the node. The
driver removes the marker to stop the pass (Ctrl-C, SIGTERM): each task then stops its
run as Ctrl-C would (it saves; status `interrupted`).
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from gazelle.config import ConfigError
from gazelle.errors import RunError
from gazelle.suite import runner
from gazelle.suite.pairs import Pair, read_status, write_status
from gazelle.suite.spec import SuiteSpec

#: Longest single wait for a task (seconds): Ctrl-C and SIGTERM are seen between waits.
WAIT_S = 1.0
#: How long cancelled tasks get to stop their runs (each saves its checkpoint).
CANCEL_TIMEOUT_S = runner.SAVE_TIMEOUT_S + 30.0
#: A task's status when its node does not see the suite's directory.
NOT_VISIBLE = "not visible"


def resources(spec: SuiteSpec, nodes: list[dict[str, Any]]) -> tuple[float, float]:
    """(CPUs, GPUs) each run's task asks for: the spec's (`--run-cpus`, `--run-gpus`, or
    what the run's flags need), else a whole node's CPUs (the largest node's) and 1 GPU when
    the cluster has one. A ConfigError when no alive node of `nodes` (`ray.nodes()`) could
    ever hold one run (Ray would leave it pending forever)."""
    alive = [dict(node.get("Resources") or {}) for node in nodes if node.get("Alive")]
    most_cpus = max((float(r.get("CPU", 0.0)) for r in alive), default=0.0)
    has_gpu = any(float(r.get("GPU", 0.0)) > 0 for r in alive)
    cpus = spec.run_cpus if spec.run_cpus is not None else most_cpus
    gpus = spec.run_gpus if spec.run_gpus is not None else (1.0 if has_gpu else 0.0)
    if not any(_fits(r, cpus, gpus) for r in alive):
        have = ", ".join(f"{r.get('CPU', 0):g} CPUs + {r.get('GPU', 0):g} GPUs" for r in alive)
        cpus_fit = any(_fits(r, cpus, 0.0) for r in alive)
        name, value = ("run_cpus", cpus) if not cpus_fit else ("run_gpus", gpus)
        raise ConfigError(
            name,
            value,
            f"what one node has (the Ray cluster's nodes: {have or 'none alive'})",
            problem=f"no node has {cpus:g} CPUs and {gpus:g} GPUs for one run",
        )
    return cpus, gpus


def _fits(node: dict[str, Any], cpus: float, gpus: float) -> bool:
    return float(node.get("CPU", 0.0)) >= cpus - 1e-9 and float(node.get("GPU", 0.0)) >= gpus - 1e-9


def at_once(nodes: list[dict[str, Any]], cpus: float, gpus: float) -> int:
    """How many runs of (cpus, gpus) the alive `nodes` hold at once."""
    total = 0
    for node in nodes:
        have = dict(node.get("Resources") or {}) if node.get("Alive") else {}
        cpu_fit = math.floor(float(have.get("CPU", 0.0)) / cpus + 1e-9) if cpus > 0 else 10**6
        gpu_fit = math.floor(float(have.get("GPU", 0.0)) / gpus + 1e-9) if gpus > 0 else 10**6
        total += min(cpu_fit, gpu_fit) if have else 0
    return total


def run_task(spec: SuiteSpec, pair: Pair, marker: str) -> dict[str, Any]:
    """The Ray task of one pair: its run (`runner.run_pair`) on the node Ray chose, once
    that node sees the suite's directory (`marker` in it). Returns its status and where."""
    import ray

    context = ray.get_runtime_context()
    where = {
        "ray_node": ray.util.get_node_ip_address(),
        "ray_node_id": context.get_node_id(),
        "ray_task": context.get_task_id(),
        "ray_worker_pid": os.getpid(),
    }
    seen = spec.out / marker
    if not seen.is_file():
        return {"status": NOT_VISIBLE, "host": socket.gethostname(), **where}
    env = dict(os.environ)
    if not context.get_accelerator_ids().get("GPU"):
        # why: Ray leaves CUDA_VISIBLE_DEVICES as it is for a task given no GPU; a run on
        # --device auto would then take a GPU that another task holds
        env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        # why: the driver removes the marker to stop the pass (Ctrl-C): the run then stops as
        # on Ctrl-C (it saves) within a poll; Ray's own cancel did not reach a running task
        status = runner.run_pair(
            spec, pair, where=where, env=env, signals=False, should_stop=lambda: not seen.exists()
        )
    except KeyboardInterrupt:
        status = "interrupted"
    return {"status": status, **where}


def _require_ray() -> Any:
    from gazelle.backends.ray import cluster

    try:
        return cluster.require_ray()
    except ConfigError as err:
        raise ConfigError("suite_backend", "ray", err.allowed) from None


def run_on_ray(spec: SuiteSpec, runnable: list[tuple[str, Pair]], counts: dict[str, int]) -> None:
    """Run `runnable` ((label, pair) each) as Ray tasks; add each one's status to `counts`.
    KeyboardInterrupt (Ctrl-C, SIGTERM) cancels the tasks (each running one stops its run,
    which saves, and is marked interrupted) and propagates."""
    if not runnable:
        return  # why: nothing to run needs no cluster
    ray = _require_ray()
    from gazelle.backends.ray import cluster

    owns = cluster.connect(spec.ray_address, allow_tokenless=spec.ray_allow_tokenless)
    try:
        nodes = ray.nodes()
        cpus, gpus = resources(spec, nodes)
        marker = spec.out / f".visible-{secrets.token_hex(8)}"
        marker.touch()
        try:
            print(
                f"gazelle suite: {len(runnable)} runs as Ray tasks of {cpus:g} CPUs and "
                f"{gpus:g} GPUs each, {at_once(nodes, cpus, gpus)} at once on the cluster now "
                "(--run-cpus, --run-gpus to choose)",
                flush=True,
            )
            _run_tasks(ray, spec, runnable, counts, (cpus, gpus), marker)
        finally:
            marker.unlink(missing_ok=True)
    finally:
        if owns:
            cluster.disconnect()


def _run_tasks(
    ray: Any,
    spec: SuiteSpec,
    runnable: list[tuple[str, Pair]],
    counts: dict[str, int],
    need: tuple[float, float],
    marker: Path,
) -> None:
    from gazelle.backends.ray import cluster

    # why: no retry by Ray: a retried task would run the pair again unseen; the suite
    # reports it failed, and --retry-failed runs it again (from its checkpoint)
    task = ray.remote(run_task).options(num_cpus=need[0], num_gpus=need[1], max_retries=0)
    refs = {task.remote(spec, pair, marker.name): (label, pair) for label, pair in runnable}
    for label, pair in runnable:
        print(f"gazelle suite: {label}: queued as a Ray task (console: {pair.log_path})")
    pending, checked = list(refs), False
    try:
        # why: SIGTERM or SIGINT of the driver cancels the tasks as Ctrl-C does (runs save)
        with runner.signals_as_interrupt():
            while pending:
                # why: bounded, so that Ctrl-C and SIGTERM are seen within WAIT_S
                ready, pending = ray.wait(pending, num_returns=1, timeout=WAIT_S)
                for ref in ready:
                    _finish(ray, spec, ref, *refs[ref], counts)
                if ready and not checked:
                    cluster.after_start()  # why: a private instance's workers listen now
                    checked = True
    except BaseException:
        _cancel(ray, pending, marker)
        raise


def _finish(
    ray: Any, spec: SuiteSpec, ref: Any, label: str, pair: Pair, counts: dict[str, int]
) -> None:
    """One finished task: its status counted and printed; a task that raised or died marks
    its pair failed; a node that did not see OUT stops the suite (RunError)."""
    try:
        result = ray.get(ref)  # ready: ray.wait returned it
    except ray.exceptions.RayError as err:
        cause = getattr(err, "cause", None) or err
        first = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300]
        why = f"its Ray task died ({type(cause).__name__}: {first})"
        write_status(pair, status="failed", error=why, ended_at=time.time())
        result = {"status": "failed"}
    if result["status"] == NOT_VISIBLE:
        raise RunError(
            f"the suite's directory {spec.out} is not visible from Ray node "
            f"{result['ray_node']} ({result['host']}): with --suite-backend ray it must be "
            "one folder that every node mounts at the same path (docs/suite.md)"
        )
    status = read_status(pair)
    started, ended = status.get("started_at"), status.get("ended_at")
    took = float(ended) - float(started) if started and ended else 0.0
    node = (status.get("where") or {}).get("ray_node", "?")
    extra = f": {status.get('error')}" if result["status"] == "failed" else ""
    said = f"{result['status']} in {took:.0f} s on {node}{extra}"
    print(f"gazelle suite: {label}: {said}", flush=True)
    counts[result["status"]] = counts.get(result["status"], 0) + 1


def _cancel(ray: Any, pending: list[Any], marker: Path) -> None:
    """Stop the tasks still pending: the marker removed, a running one stops its run as
    Ctrl-C would (it saves) and marks it interrupted; a queued one is cancelled (if it
    starts all the same, it finds no marker and runs nothing). Waits for them at most
    `CANCEL_TIMEOUT_S`."""
    marker.unlink(missing_ok=True)
    for ref in pending:
        ray.cancel(ref)
    if pending:
        # why: bounded: a run that cannot save within SAVE_TIMEOUT_S is killed by run_pair
        ray.wait(pending, num_returns=len(pending), timeout=CANCEL_TIMEOUT_S)
