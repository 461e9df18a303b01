"""Learners 1..N-1 of a run with `--learners N` on Ray: Ray actors placed by Ray (one GPU
each when the run's learner is on CUDA, else the learner's CPUs each), joined with the
driver (rank 0, the run's own process) in a torch.distributed group
(`gazelle.backends.collective`). Each runs the work it is handed (IMPALA's and APPO's
`ranks.follow`): this module knows no algorithm.

The rendezvous: rank 0's store listens on the driver's address as Ray knows it (its node's
address): 127.0.0.1 on a private or loopback Ray, the driver's cluster address on a cluster,
never every interface; gloo's (NCCL's) sockets bind the interface holding each node's
address. The store's address reaches the learners only as an argument of their Ray call
(through the cluster's token-authenticated connections); what they read from the store is
never unpickled (docs/distributed.md, "What protects the rendezvous").
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from typing import Any

import torch

from gazelle import registrations
from gazelle.backends import LearnerRequest
from gazelle.backends.collective import (
    READY_KEY,
    LearnerLost,
    ProcessGroupCollective,
    client_store,
    interface_of,
    learner_lost,
    listen,
    loopback_interface,
    process_state,
    serve_store,
    start_timeout,
    wait_for_keys,
)
from gazelle.backends.ray.sockets import is_loopback
from gazelle.config import ConfigError
from gazelle.errors import RunError
from gazelle.registrations import Registrations
from gazelle.runtime.interfaces import Work

#: How long a learner's death may take to reach the driver after it broke a collective call.
DEATH_NOTICE_S = 2.0


def node_address() -> str:
    """This process's node address as Ray knows it (127.0.0.1 on a private instance)."""
    import ray

    return str(ray.util.get_node_ip_address())


def rendezvous_host(driver: str) -> str:
    """Where learner 0's store listens, for a driver whose Ray node address is `driver`: a
    one-machine Ray's addresses are all loopback (127.0.0.1); on a cluster, the driver's own
    cluster address, the one the other nodes reach it by; never every interface."""
    if is_loopback(driver):
        return "127.0.0.1"
    if ipaddress.ip_address(driver).is_unspecified:
        raise RunError(f"--learners: Ray gives this driver's node the address {driver}; the "
                       "learners' rendezvous never listens on every interface")  # fmt: skip
    return driver


def group_interface(host: str, node: str) -> str | None:
    """The interface gloo (or NCCL) binds in a process on node `node` of a group whose
    store is on `host`: loopback for a one-machine group, else the one holding `node`."""
    if is_loopback(host):
        return loopback_interface()
    name = interface_of(node)
    named = os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME")
    if name is None and not named:
        raise RunError(
            f"--learners: no network interface holds this node's Ray address {node}; set "
            "GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME on GPUs) to the cluster network's"
        )
    return name


def gpu_id(device: torch.device) -> str:
    """A GPU's identity across processes (its UUID), "" for the CPU."""
    if device.type != "cuda":
        return ""
    return str(torch.cuda.get_device_properties(device).uuid)


class LearnerHost:
    """Learner rank r > 0 in a Ray actor process (`ray.remote` wraps it at use, so this
    module imports without Ray)."""

    def __init__(self, captured: Registrations) -> None:
        # why: the driver's registered torsos and envs, before the work builds anything.
        captured.restore()

    def run(
        self, rank: int, size: int, host: str, port: int, timeout_s: float, cuda: bool,
        work: Work, settings: Any,
    ) -> None:  # fmt: skip
        """Join rank 0's group, say where this learner is, then `work(collective, settings)`
        until rank 0 says stop."""
        # why: Ray shows this actor only the GPU it gave it, as cuda:0.
        device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        store = client_store(host, port, size, start_timeout(timeout_s))
        node = node_address()
        store.set(READY_KEY.format(rank), f"{os.getpid()} {node} {gpu_id(device)}")
        # why: no check of its own: Ray kills an actor whose owner (the driver) dies, and
        # the store's connection to the driver breaks with it.
        collective = ProcessGroupCollective(
            store, rank, size, device, timeout_s, interface=group_interface(host, node)
        )
        try:
            work(collective, settings)
        finally:
            collective.close()


class RayLearners:
    """Ranks 1..N-1 as Ray actors, and this process (the driver) as rank 0 (`Learners`)."""

    def __init__(self, request: LearnerRequest) -> None:
        from gazelle.backends.ray.cluster import connect, disconnect, require_ray

        ray = self._ray = require_ray()
        self.timeout_s, self.size = request.timeout_s, request.size
        self.hosts: list[Any] = []
        self.runs: list[Any] = []
        self.where: dict[int, tuple[str, str]] = {}  # rank -> (pid, node)
        # why: a run's transport joins Ray first and owns the connection; a caller without one
        # (a test, a benchmark) has it joined here, and ended by `close`.
        self.owns_ray = not ray.is_initialized() and connect(
            request.cluster_address, request.dashboard, request.allow_tokenless
        )
        try:
            self._start(request)
        except BaseException:
            self._kill()
            if self.owns_ray:
                disconnect()
            raise

    def _start(self, request: LearnerRequest) -> None:
        ray, size = self._ray, request.size
        cuda = request.device.type == "cuda"
        _check_room(ray, size, request.cpus_per_learner, cuda)
        driver = node_address()
        host = rendezvous_host(driver)
        server = listen(host)
        port = server.getsockname()[1]
        store = serve_store(server, size, start_timeout(request.timeout_s))
        remote = ray.remote(LearnerHost).options(
            num_cpus=request.cpus_per_learner, num_gpus=1 if cuda else 0, max_restarts=0
        )
        captured = registrations.capture()
        for rank in range(1, size):
            learner = remote.remote(captured)
            self.hosts.append(learner)
            args = (rank, size, host, port, request.timeout_s, cuda)
            self.runs.append(learner.run.remote(*args, request.work, request.settings))
        # why: the group's forming blocks; first see every learner up (one that fails to
        # start ends the wait at once, with its error, instead of the timeout).
        keys = [READY_KEY.format(rank) for rank in range(1, size)]
        wait_for_keys(store, keys, start_timeout(request.timeout_s), self.check)
        gpus = {gpu_id(request.device): 0}
        for rank in range(1, size):
            said = store.get(READY_KEY.format(rank)).decode().split(" ")
            pid, node, gpu = [*said, "", "", ""][:3]
            self.where[rank] = (pid, node)
            if gpu and gpu in gpus:
                raise RunError(
                    f"--learners: learner {rank} got the GPU of learner {gpus[gpu]} ({gpu} on "
                    f"{node}): Ray does not know the driver's GPU is taken; give Ray the "
                    "driver node's other GPUs only (CUDA_VISIBLE_DEVICES for `ray start`)"
                )
            gpus[gpu] = rank
        self.collective = ProcessGroupCollective(
            store, 0, size, request.device, request.timeout_s, self.check,
            group_interface(host, driver),
        )  # fmt: skip

    def _name(self, rank: int) -> str:
        pid, node = self.where.get(rank, ("?", "?"))
        return f"learner {rank} (pid {pid} on {node})" if rank in self.where else f"learner {rank}"

    def _dead(self) -> list[str]:
        """`learner r (pid p on node) died: why` for each learner whose Ray call ended."""
        ray = self._ray
        if not self.runs:
            return []
        done, _ = ray.wait(list(self.runs), num_returns=len(self.runs), timeout=0)
        lines = []
        for rank, ref in enumerate(self.runs, start=1):
            if ref not in done:
                continue
            try:
                ray.get(ref, timeout=0)
                why = "left the group"
            except ray.exceptions.RayActorError as err:
                why = f"died: its Ray actor is gone ({type(err).__name__})"
            except Exception as err:  # why: the learner's own error, named
                cause = getattr(err, "cause", err)
                line = (str(cause).strip().splitlines() or [""])[-1][:200]
                why = f"failed: {type(cause).__name__}: {line}"
            lines.append(f"{self._name(rank)} {why}")
        return lines

    def _stopped(self) -> list[str]:
        """`learner r (...) is stopped` for each learner on this machine stopped by a signal."""
        here = node_address()
        return [
            f"{self._name(rank)} is stopped"
            for rank, (pid, node) in self.where.items()
            if node == here and pid.isdigit() and process_state(int(pid)) in ("T", "t")
        ]

    def check(self) -> None:
        dead = self._dead()
        if dead:
            raise LearnerLost(f"{'; '.join(dead)}; the run stops")

    def lost(self, err: BaseException) -> LearnerLost | None:
        return learner_lost(err, self._dead, self._stopped, self.timeout_s, DEATH_NOTICE_S)

    def close(self, timeout: float = 10.0) -> None:
        collective = getattr(self, "collective", None)
        if collective is not None:
            with contextlib.suppress(Exception):
                collective.post(None)  # why: the learners leave their wait and return
            with contextlib.suppress(Exception):
                self._ray.wait(list(self.runs), num_returns=len(self.runs), timeout=timeout)
        self._kill()
        if collective is not None:
            collective.close()
        if self.owns_ray:
            from gazelle.backends.ray.cluster import disconnect

            disconnect()

    def _kill(self) -> None:
        for learner in self.hosts:
            with contextlib.suppress(Exception):
                self._ray.kill(learner, no_restart=True)
        # why: drop every handle and ref while Ray is up (one freed after `ray.shutdown()`
        # ends the process: see `RayFleet.close`).
        self.hosts.clear()
        self.runs.clear()


def _check_room(ray: Any, size: int, cpus: float, cuda: bool) -> None:
    """Refuse (naming --learners) a cluster without the GPUs or CPUs ranks 1..N-1 need:
    Ray would leave them pending until the start-up bound."""
    have = ray.cluster_resources()
    if cuda and have.get("GPU", 0.0) < size - 1:
        gpus = int(have.get("GPU", 0.0))
        raise ConfigError(
            "learners",
            size,
            f"at most {gpus + 1} with a CUDA learner: learners 1..N-1 take a GPU each from "
            f"the Ray cluster, which has {gpus} (learner 0 uses the driver's)",
        )
    if have.get("CPU", 0.0) + 1e-9 < (size - 1) * cpus:
        raise ConfigError(
            "learners",
            size,
            f"at most {int(have.get('CPU', 0.0) // cpus) + 1}: learners 1..N-1 take {cpus:g} "
            f"CPUs each (the learner's threads) and the Ray cluster has {have.get('CPU', 0):g}",
        )


def build_learners(request: LearnerRequest) -> RayLearners:
    """`gazelle.backends.build_learners` on Ray."""
    return RayLearners(request)
