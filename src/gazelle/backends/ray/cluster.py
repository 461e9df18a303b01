"""Joining or starting the Ray cluster a run uses, with private defaults.

- With no address gazelle starts a Ray instance of its own on this machine and stops it at
  the end of the run. It is private whatever imported Ray first: every Ray port is bound
  to 127.0.0.1, the dashboard is off, and Ray's token authentication is on
  (`RAY_AUTH_MODE=token`, the token in `~/.ray/auth_token`). After `ray.init` gazelle reads
  back the addresses Ray reports and the authentication mode, and refuses to go on (one
  line) if any address is not loopback or the token is off.
- With `--ray-address HOST:PORT` (or `auto`) it joins a cluster someone started with
  `ray start --head`; what that cluster exposes is up to whoever started it
  (docs/distributed.md says what each node must set). gazelle warns in one line when it
  could join without a token, since then anyone who reaches the cluster can run code on it.
- `ray://` (Ray Client) addresses are refused: gazelle's driver must run on a node of the
  cluster (its learner receives every unroll).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import sys
from typing import Any

from gazelle.config import ConfigError
from gazelle.errors import RunError

#: Ray's switch for multi-node clusters; "0" makes a Ray instance take 127.0.0.1 as its node
#: address, and every Ray process binds its ports to that address.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

#: Ray's authentication switch ("token" or "disabled"), read by every Ray process.
AUTH_ENV = "RAY_AUTH_MODE"

#: The Ray versions gazelle supports (pyproject's `ray` extra says the same): 2.59 is the
#: first whose `ray.init` turns token authentication on for a new local instance, and the
#: `ray` tests run on this range.
SUPPORTED = ">=2.59,<3"
MIN_VERSION = (2, 59)

INSTALL = f"pip install -e '.[ray]' (or pip install 'ray{SUPPORTED}')"


def require_ray() -> Any:
    """`import ray`, or a one-line error saying how to install it (or upgrade it)."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError("backend", "ray", f"local, or install Ray first: {INSTALL}")
    import ray

    if _version(ray.__version__) < MIN_VERSION:
        raise ConfigError("backend", f"ray (Ray {ray.__version__} is installed)", INSTALL)
    return ray


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)  # a dev build without a number: treated as too old to trust


def connect(address: str | None, dashboard: bool = False) -> bool:
    """Make sure this process is connected to Ray: join `address`, or start a private local
    instance when it is None. Returns True when this call started or joined it (and the
    caller should `ray.shutdown()` at the end), False when Ray was already initialised."""
    if address is not None and address.startswith("ray://"):
        raise ConfigError(
            "ray_address",
            address,
            "HOST:PORT of the cluster's head (its GCS, `ray start --head --port`) or auto, "
            "with gazelle started on a node of the cluster; Ray Client (ray://) is not "
            "supported, as the learner must receive every unroll",
        )
    if address is None:
        loaded = sys.modules.get("ray")
        if loaded is not None and loaded.is_initialized():
            # why: a process already connected keeps its Ray as it is: switching its
            # authentication mode under a live connection crashes Ray's clients in it (a
            # check failure on a machine without ~/.ray/auth_token).
            return False
        _make_private()
    ray = require_ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": True, "logging_level": "WARNING"}
    if address is None:
        if dashboard:
            _require_dashboard()
        kwargs["include_dashboard"] = dashboard
        # why: Ray starts its workers at nice 15; gazelle's actors are the run's main work,
        # and at 15 they starve next to the learner (a 20 ms unroll took 500 ms on a busy
        # 2-core machine). A cluster started by `ray start` needs RAY_worker_niceness=0.
        kwargs["_system_config"] = {"worker_niceness": 0}
    # why: gazelle's own processes need no Ray runtime env; workers import the installed
    # gazelle (on a real cluster every node installs it: docs/distributed.md).
    # why: "local" starts a new instance even when one runs here already (ray.init() with
    # no address would join a `ray start` instance or a test cluster without being asked).
    context = ray.init(address=address or "local", **kwargs)
    if address is None:
        try:
            check_private(reported_addresses(context), token_auth_on())
        except BaseException:
            ray.shutdown()
            raise
    elif not token_auth_on():
        print(
            f"gazelle: warning: the Ray cluster at {address} let this driver join without a "
            "token: anyone who can reach it can run code on it (docs/distributed.md, 'Token "
            "authentication')",
            file=sys.stderr,
        )
    return True


def _make_private() -> None:
    """Loopback and token for the instance this process is about to start, whether or not
    Ray was imported already."""
    # why: Ray reads LOOPBACK_ENV into a module constant at its first import, and its
    # processes (GCS, raylet, workers) read it from the environment they inherit; set both.
    os.environ[LOOPBACK_ENV] = "0"
    constants: Any = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False
    if os.environ.get(AUTH_ENV, "").lower() != "token":
        # A user's RAY_AUTH_MODE=disabled is overridden too: a private instance is never
        # left without a token (check_private refuses one).
        os.environ[AUTH_ENV] = "token"
        if "ray" in sys.modules:
            # why: a Ray imported earlier cached its config; make it read the mode again.
            _raylet().Config.initialize("")


def _require_dashboard() -> None:
    """`--ray-dashboard` needs Ray's dashboard packages (`ray[default]`)."""
    from ray._private.utils import get_dashboard_dependency_error

    missing = get_dashboard_dependency_error()
    if missing is not None:
        raise ConfigError(
            "ray_dashboard",
            True,
            "off, or install Ray's dashboard first: pip install -e '.[ray-dashboard]' (or "
            f"pip install 'ray[default]{SUPPORTED}'); missing: {missing.name or missing}",
        )


def token_auth_on() -> bool:
    """Whether this process talks to Ray with token authentication."""
    raylet = _raylet()
    return bool(raylet.get_authentication_mode() == raylet.AuthenticationMode.TOKEN)


def _raylet() -> Any:
    """Ray's compiled core (its authentication mode and config live there)."""
    return importlib.import_module("ray._raylet")


def reported_addresses(context: Any) -> dict[str, str]:
    """What a started instance reports: the node's address, the GCS, the dashboard (if on)
    and every node's manager address, as `name -> host`."""
    import ray

    info = dict(getattr(context, "address_info", {}) or {})
    hosts = {
        "node": str(info.get("node_ip_address", "")),
        "raylet": str(info.get("raylet_ip_address") or info.get("node_ip_address", "")),
        "gcs": str(info.get("gcs_address", "")).rsplit(":", 1)[0],
    }
    dashboard = getattr(context, "dashboard_url", None) or info.get("webui_url")
    if dashboard:
        hosts["dashboard"] = str(dashboard).split("//")[-1].rsplit(":", 1)[0]
    for node in ray.nodes():
        hosts[f"node {node.get('NodeID', '?')[:8]}"] = str(node.get("NodeManagerAddress"))
    return hosts


def is_loopback(host: str) -> bool:
    """`127.x`, `::1`, `localhost`, and IPv4-mapped `::ffff:127.x` (as `ss` shows them)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def check_private(hosts: dict[str, str], token: bool) -> None:
    """Refuse (one line) a private instance that reports a non-loopback address among
    `hosts` (`reported_addresses`) or runs without token authentication (`token`)."""
    exposed = {k: v for k, v in hosts.items() if not is_loopback(v)}
    if exposed:
        listed = ", ".join(f"{k} {v}" for k, v in exposed.items())
        raise RunError(
            f"refusing to train: the private Ray instance is not on loopback "
            f"({listed}); set {LOOPBACK_ENV}=0 before anything imports Ray, or report this"
        )
    if not token:
        raise RunError(
            "refusing to train: the private Ray instance runs without token "
            f"authentication ({AUTH_ENV}={os.environ.get(AUTH_ENV)!r}); use Ray{SUPPORTED}"
        )


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
