"""The local backend: actor processes on this machine, unrolls in shared-memory slots (only
slot indices travel through a queue), weights in one shared flat tensor, and optionally the
central inference server as a thread of the learner's process. Workers (A3C's) are
processes running the work they are handed (`TaskFleet`), with the parameter store in this
process, handed to each of them (its tensors in shared memory). Learners 2..N of a run with
`--learners N` are spawned processes joined with the trainer's (`learners.py`)."""

from __future__ import annotations

import copy

import torch.multiprocessing as mp

from gazelle.backends import BackendRequest, Transport, WorkerRequest, Workers
from gazelle.backends.local.buffers import SlotLayout, UnrollBuffers
from gazelle.backends.local.channels import StopFlag
from gazelle.backends.local.fleet import LocalFleet
from gazelle.backends.local.inference import InferenceChannels, InferenceServer
from gazelle.backends.local.learners import build_learners
from gazelle.backends.local.params import ParamStore
from gazelle.backends.local.process import TaskFleet
from gazelle.config.registry import Backend
from gazelle.models import state_size

__all__ = [
    "LOCAL", "LocalFleet", "ParamStore", "SlotLayout", "UnrollBuffers", "build", "build_workers",
]  # fmt: skip


def build(request: BackendRequest) -> Transport:
    """Shared buffers and weights, and the (not yet started) fleet of actor processes."""
    first = request.actors[0]
    ctx = mp.get_context("spawn")
    layout = SlotLayout(first.unroll_length, first.obs_spec, state_size(first.use_lstm))
    buffers = UnrollBuffers(layout, len(request.actors), request.slots_per_actor, ctx)
    if buffers.num_slots < request.batch_size:
        raise ValueError(
            f"--batch-size: {request.batch_size} unrolls per batch, but the actors hold only "
            f"{buffers.num_slots} (num_actors x envs_per_actor x slots_per_env); allowed: at "
            f"most {buffers.num_slots}, or raise --num-actors / --envs-per-actor"
        )
    params = ParamStore(request.agent, ctx)
    if request.inference != "central":
        fleet = LocalFleet(
            request.actors, buffers, params, ctx, actor_timeout_s=request.actor_timeout_s
        )
        return Transport(buffers, params, fleet)
    # why: a request slot per env group (`group_slot`), each as large as the largest group.
    channels = InferenceChannels(
        first.obs_spec,
        len(request.actors) * first.env_groups,
        max(hi - lo for lo, hi in first.group_bounds()),
        state_size(first.use_lstm),
        ctx,
    )
    stop = StopFlag()
    # why: the server gets its own copy of the agent (on the learner's device) and loads
    # published weights into it between batches; the learner's module changes in place
    # during an update and must never be read mid-step.
    server = InferenceServer(
        channels,
        copy.deepcopy(request.agent),
        params,
        request.device,
        stop,
        max_batch=request.inference_max_batch,
        max_wait_s=request.inference_max_wait_s,
    )
    fleet = LocalFleet(
        request.actors,
        buffers,
        params,
        ctx,
        channels=channels,
        server=server,
        stop_event=stop,
        actor_timeout_s=request.actor_timeout_s,
    )
    return Transport(buffers, params, fleet)


def build_workers(request: WorkerRequest) -> Workers:
    """The parameter store, built here (`make_server(agent)`: its tensors in shared memory,
    so every worker process updates the same weights), and the worker processes."""
    server = request.make_server(request.agent)
    fleet = TaskFleet(
        request.specs,
        request.work,
        (server, request.settings),
        actor_timeout_s=request.actor_timeout_s,
    )
    return Workers(server, fleet)


#: The local backend, as `gazelle.config.registry` knows it: actors on this machine's cores.
LOCAL = Backend(
    name="local", build=build, build_workers=build_workers, build_learners=build_learners
)
