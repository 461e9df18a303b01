"""Backends: where actors run and how unrolls, weights and telemetry travel.

An algorithm describes the actors it needs (`BackendRequest`); the backend named by
`--backend` builds them and hands back a `Transport`: a `BatchSource` for the loop, a
`ParamPublisher` for new weights and the `Fleet` of actors. Everything is typed against
`gazelle.runtime.interfaces`, so a new backend is one new module listed in `BACKENDS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from gazelle.models import Agent
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.interfaces import BatchSource, Fleet, ParamPublisher

#: Backend name -> module with `build(request: BackendRequest) -> Transport`.
BACKENDS = {"local": "gazelle.backends.local", "ray": "gazelle.backends.ray"}


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


def build_backend(name: str, request: BackendRequest) -> Transport:
    """Build the backend `name` (one of `BACKENDS`) for `request`."""
    if name not in BACKENDS:
        raise ValueError(f"--backend: invalid value {name!r}; allowed: {' | '.join(BACKENDS)}")
    module = importlib.import_module(BACKENDS[name])
    transport: Transport = module.build(request)
    return transport
