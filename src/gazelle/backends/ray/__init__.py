"""The Ray backend: the same runtime `Actor`s as the local backend, run as Ray actors on a
Ray cluster (this machine's own private instance, or the one `--ray-address` names).

    driver (learner, pump thread) --unroll.remote(weights ref)--> Ray actor (Actor.unroll)
    driver <--unroll as numpy arrays, through the object store-- Ray actor

With `--inference central` the actors ask an inference server, a Ray actor placed on the
learner's node, for their actions (the seed's dynamic batching across machines). With
`--learners N` learners 1..N-1 are Ray actors too (`learners.py`).
Import needs Ray (`pip install -e '.[ray]'`); `gazelle.backends.ray.cluster` names it when
it is missing.
"""

from __future__ import annotations

from typing import Any

from gazelle.backends import BackendRequest, LearnerRequest, Transport, WorkerRequest, Workers
from gazelle.backends.ray.cluster import check_room, connect, require_ray
from gazelle.config.registry import Backend


def build(request: BackendRequest) -> Transport:
    """Connect to (or start) Ray and build the (not yet started) fleet of Ray actors."""
    require_ray()
    first = request.actors[0]
    slots_per_env = max(1, request.slots_per_actor // first.envs_per_actor)
    capacity = len(request.actors) * first.envs_per_actor * slots_per_env
    if capacity < request.batch_size:
        raise ValueError(
            f"--batch-size: {request.batch_size} unrolls per batch, but the actors hold only "
            f"{capacity} (num_actors x envs_per_actor x slots_per_env); allowed: at most "
            f"{capacity}, or raise --num-actors / --envs-per-actor"
        )
    owns = connect(request.cluster_address, request.dashboard, request.allow_tokenless)
    check_room(len(request.actors), request.cpus_per_actor)
    from gazelle.backends.ray.fleet import RayFleet
    from gazelle.backends.ray.params import RayParams

    params = RayParams()
    server = None
    if request.inference == "central":
        from gazelle.backends.ray.inference import start_server

        server = start_server(request)
    fleet = RayFleet(
        request.actors,
        params,
        slots_per_env,
        cpus_per_actor=request.cpus_per_actor,
        actor_timeout_s=request.actor_timeout_s,
        owns_ray=owns,
        server=server,
    )
    return Transport(fleet, params, fleet)


def build_workers(request: WorkerRequest) -> Workers:
    """Workers as Ray actors and the parameter store in a parameter-server actor
    (`gazelle.backends.ray.workers`)."""
    require_ray()
    from gazelle.backends.ray.workers import build_workers as build_ray_workers

    return build_ray_workers(request)


def build_learners(request: LearnerRequest) -> Any:
    """Learners 1..N-1 of `--learners N` as Ray actors, joined with the driver as rank 0
    (`gazelle.backends.ray.learners`)."""
    require_ray()
    from gazelle.backends.ray.learners import build_learners as build_ray_learners

    return build_ray_learners(request)


#: The Ray backend, as `gazelle.config.registry` knows it.
RAY = Backend(
    name="ray",
    build=build,
    build_workers=build_workers,
    build_learners=build_learners,
    own_flags=("ray_address", "ray_dashboard", "ray_allow_tokenless"),
    # why: the cluster's cores are not this machine's; the layout rule cannot measure them.
    on_this_machine=False,
    # why: an actor with one unroll call in flight would idle for each round trip.
    single_slot=False,
)
