"""Backends: where actors run and how unrolls, weights and telemetry travel.

An algorithm describes the actors it needs (`BackendRequest`); the backend named by
`--backend` builds them and hands back a `Transport`: a `BatchSource` for the loop, a
`ParamPublisher` for new weights and the `Fleet` of actors. An algorithm whose workers
learn for themselves (A3C) describes them in a `WorkerRequest`: the work each runs (a
callable) and the parameter store they push to (the algorithm's optimiser over its global
network); the backend keeps the store where its workers reach it and hands back `Workers`:
a `ParameterServer` and the `Fleet` of workers. A loop with several learners
(`--learners N`) describes them in a `LearnerRequest` (the work ranks 1..N-1 run); the
backend starts them, joins them with this process as rank 0 and hands back `Learners`: rank
0's `Collective` and what watches the others. Everything is typed against
`gazelle.runtime.interfaces`, so a new backend is one new package declaring its `Backend`
(`gazelle.config.registry`: its `build`, the flags that are its own, how it shares the
machine) and one line in the registry's `BUILT_IN_BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from gazelle.config import ConfigError, registry
from gazelle.models import Agent
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.interfaces import (
    BatchSource,
    Collective,
    Fleet,
    ParameterServer,
    ParamPublisher,
    Work,
)


@dataclass(frozen=True)
class BackendRequest:
    """What an algorithm's actors need, whatever runs them.

    Attributes:
        actors: one spec per actor (level, envs, unroll length, agent shape, seed).
        slots_per_actor: unrolls each actor may have written but not yet consumed.
        batch_size: unrolls per learner batch (the backend checks it can ever fill one).
        agent: the learner's agent (central inference serves a copy of it).
        device: the learner's device (central inference runs there).
        inference: local (each actor runs its own agent copy) or central.
        inference_max_batch: central inference: most envs per batch (None: all).
        inference_max_wait_s: central inference: collection window after a first request.
        actor_timeout_s: an actor silent this long is killed and replaced.
        cluster_address: a cluster to join (Ray); None: this machine.
        cpus_per_actor: CPUs each actor declares to the cluster's scheduler (Ray).
        dashboard: start a private Ray instance with its dashboard (Ray).
        allow_tokenless: join a cluster that answers clients without a token (Ray).
    """

    actors: list[ActorSpec]
    slots_per_actor: int
    batch_size: int
    agent: Agent
    device: torch.device
    inference: str = "local"
    inference_max_batch: int | None = None
    inference_max_wait_s: float = 0.002
    actor_timeout_s: float = 120.0
    cluster_address: str | None = None
    cpus_per_actor: float = 1.0
    dashboard: bool = False
    allow_tokenless: bool = False


@dataclass
class Transport:
    """What a backend gives the loop."""

    batches: BatchSource
    params: ParamPublisher
    fleet: Fleet


@dataclass(frozen=True)
class WorkerRequest:
    """What an algorithm's workers need (A3C's), whatever runs them.

    Attributes:
        work: what each worker process runs, `work(spec, context, server, settings)`
            (`gazelle.runtime.interfaces.Work`: a module-level function, picklable).
        specs: one spec per worker (level, envs, agent shape, seed).
        settings: the work's own settings (picklable), handed to every worker.
        agent: the global network, whose weights the parameter store holds.
        make_server: the parameter store: `make_server(agent) -> ParameterServer`, the
            algorithm's optimiser over the global network (picklable); the backend calls it
            where it keeps the store (this process, or a parameter-server process).
        actor_timeout_s: a worker silent this long is killed and replaced.
        cluster_address: a cluster to join (Ray); None: this machine.
        cpus_per_actor: CPUs each worker declares to the cluster's scheduler (Ray).
        dashboard: start a private Ray instance with its dashboard (Ray).
        allow_tokenless: join a cluster that answers clients without a token (Ray).
    """

    work: Work
    specs: list[ActorSpec]
    settings: Any
    agent: nn.Module
    make_server: Callable[[nn.Module], ParameterServer]
    actor_timeout_s: float = 120.0
    cluster_address: str | None = None
    cpus_per_actor: float = 1.0
    dashboard: bool = False
    allow_tokenless: bool = False


@dataclass
class Workers:
    """What a backend gives an algorithm's loop for its workers."""

    server: ParameterServer
    fleet: Fleet


@dataclass(frozen=True)
class LearnerRequest:
    """The learners of a run (`--learners N`), whatever runs them.

    Attributes:
        work: what ranks 1..N-1 run, `work(collective, settings)` (a module-level function,
            picklable; `collective` is that rank's `Collective`).
        settings: the work's own settings (picklable), handed to every rank.
        size: the number of learners, N (this process is rank 0).
        device: rank 0's device; on CUDA, rank r takes the r-th GPU after it (NCCL).
        timeout_s: the longest a collective call (or the rendezvous) waits for the others.
        cluster_address: a cluster to join (Ray); None: this machine.
        cpus_per_learner: CPUs each of ranks 1..N-1 declares to the cluster's scheduler
            (Ray): its torch threads on CPU.
        dashboard: start a private Ray instance with its dashboard (Ray).
        allow_tokenless: join a cluster that answers clients without a token (Ray).
    """

    work: Work
    settings: Any
    size: int
    device: torch.device
    timeout_s: float = 120.0
    cluster_address: str | None = None
    cpus_per_learner: float = 1.0
    dashboard: bool = False
    allow_tokenless: bool = False


class Learners(Protocol):
    """What a backend gives the loop for its learners: rank 0's side of the group, and the
    watch over ranks 1..N-1."""

    collective: Collective

    def check(self) -> None:
        """Raise `LearnerLost` (one line, naming the learner) if a learner has died."""
        ...

    def lost(self, err: BaseException) -> Exception | None:
        """The one-line `LearnerLost` for `err` raised by a step while the learners work
        together, naming the learner that died or did not answer where it can be told;
        None when `err` is not the learners' (a fault of the step itself)."""
        ...

    def close(self, timeout: float = 10.0) -> None:
        """Tell the learners to stop, wait for them (bounded), then kill any left."""
        ...


def build_learners(name: str, request: LearnerRequest) -> Learners:
    """Start ranks 1..N-1 of `request` on backend `name` and join them as rank 0."""
    backend = _backend(name)
    if backend.build_learners is None:
        with_learners = [b.name for b in registry.backends() if b.build_learners is not None]
        raise ValueError(
            f"--learners {request.size}: --backend {name!r} runs one learner; allowed: "
            f"--learners 1, or --backend {' | '.join(with_learners)}"
        )
    learners: Learners = backend.build_learners(request)
    return learners


def _backend(name: str) -> registry.Backend:
    try:
        return registry.backend(name)
    except ConfigError:
        allowed = " | ".join(registry.backend_names())
        raise ValueError(f"--backend: invalid value {name!r}; allowed: {allowed}") from None


def build_backend(name: str, request: BackendRequest) -> Transport:
    """Build the backend `name` (`gazelle.config.registry.backend_names()`) for `request`."""
    transport: Transport = _backend(name).build(request)
    return transport


def build_workers(name: str, request: WorkerRequest) -> Workers:
    """The parameter store and the (not yet started) workers of `request` on backend
    `name`."""
    backend = _backend(name)
    if backend.build_workers is None:
        with_workers = [b.name for b in registry.backends() if b.build_workers is not None]
        raise ValueError(
            f"--backend: {name!r} runs no workers; allowed: {' | '.join(with_workers)}"
        )
    workers: Workers = backend.build_workers(request)
    return workers
