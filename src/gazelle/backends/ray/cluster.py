"""Joining or starting the Ray cluster a run uses, with private defaults.

- With no address gazelle starts a Ray instance of its own on this machine, listening on
  loopback only (every Ray port bound to 127.0.0.1) with the dashboard off, and stops it
  at the end of the run. Ray (>= 2.52) also protects it with a token (`~/.ray/auth_token`).
- With `--ray-address HOST:PORT` (or `auto`) it joins a cluster someone started with
  `ray start --head`; what that cluster exposes is up to whoever started it (see
  docs/distributed.md).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from gazelle.config import ConfigError

#: Ray's switch for multi-node clusters; "0" makes a Ray instance bind its ports to loopback
#: (Ray reads it when it is first imported, and its processes inherit it).
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

#: The Ray versions the `ray` tests run on (pyproject's `ray` extra says the same).
SUPPORTED = ">=2.52,<3"


def require_ray() -> Any:
    """`import ray`, or a one-line error saying how to install it."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "backend",
            "ray",
            "local, or install Ray first: pip install -e '.[ray]' (or pip install 'ray"
            f"{SUPPORTED}')",
        )
    import ray

    return ray


def connect(address: str | None, dashboard: bool = False) -> bool:
    """Make sure this process is connected to Ray: join `address`, or start a private local
    instance when it is None. Returns True when this call started or joined it (and the
    caller should `ray.shutdown()` at the end), False when Ray was already initialised."""
    if "ray" not in sys.modules and address is None:
        # why: before the first `import ray`, which reads it; only for an instance we start
        # ourselves (a node joining a real cluster must advertise a reachable address).
        os.environ.setdefault(LOOPBACK_ENV, "0")
    ray = require_ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": True, "logging_level": "WARNING"}
    if address is None:
        kwargs["include_dashboard"] = dashboard
        # why: Ray starts its workers at nice 15; gazelle's actors are the run's main work,
        # and at 15 they starve next to the learner (a 20 ms unroll took 500 ms on a busy
        # 2-core machine). A cluster started by `ray start` needs RAY_worker_niceness=0.
        kwargs["_system_config"] = {"worker_niceness": 0}
    # why: gazelle's own processes need no Ray runtime env; workers import the installed
    # gazelle (on a real cluster every node installs it: docs/distributed.md).
    # why: "local" starts a new instance even when one runs here already (ray.init() with
    # no address would join a `ray start` instance or a test cluster without being asked).
    ray.init(address=address or "local", **kwargs)
    return True


def cluster_cpus() -> float:
    """CPUs the cluster has in all (0 if Ray reports none)."""
    ray = require_ray()
    return float(ray.cluster_resources().get("CPU", 0.0))


def check_room(actors: int, cpus_each: float, what: str = "actors") -> None:
    """Raise a clear error when the cluster cannot place `actors` x `cpus_each` CPUs (Ray
    would otherwise leave them pending forever)."""
    have = cluster_cpus()
    need = actors * cpus_each
    if need > have + 1e-9:
        raise ConfigError(
            "num_actors",
            actors,
            f"at most {int(have // cpus_each)} {what} of {cpus_each:g} CPU each: the Ray "
            f"cluster has {have:g} CPUs (lower --num-actors or --ray-actor-cpus, or add "
            "nodes)",
        )
