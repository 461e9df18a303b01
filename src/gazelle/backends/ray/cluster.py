"""Joining or starting the Ray cluster a run uses, with private defaults.

- With no address gazelle starts a Ray instance of its own on this machine and stops it at
  the end of the run. It is private whatever imported Ray first: every Ray port is bound
  to 127.0.0.1, the dashboard is off, Ray's token authentication is on
  (`RAY_AUTH_MODE=token`, the token file 0600), and its session files live in a folder only
  this user can enter (`gazelle.backends.ray.privacy`). After `ray.init` gazelle reads back
  the addresses Ray reports, the authentication mode and the real listening sockets of its
  Ray processes (again once the actors run), and refuses to go on (one line) if anything is
  beyond loopback or the token is off.
- With `--ray-address HOST:PORT` (or `auto`) it joins a cluster someone started with
  `ray start --head` (`gazelle.backends.ray.join`): `auto` reads RAY_ADDRESS first, Ray
  Client (`ray://`) is refused, `RAY_*` variables that redirect Ray are cleared, and a
  cluster that answers a client without a token is refused unless
  `--ray-allow-tokenless` (then a warning line).
- A process already connected to Ray (a `ray.init` of the user's own) keeps its connection
  and gets the same readback (`readback_connected`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from gazelle.backends.ray import join, privacy
from gazelle.backends.ray.sockets import is_loopback
from gazelle.config import ConfigError
from gazelle.errors import RunError

#: Ray's switch for multi-node clusters (`privacy.loopback_only`).
LOOPBACK_ENV = privacy.LOOPBACK_ENV

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


#: The private instance this process started: its temp dir (removed by `disconnect`).
_PRIVATE: dict[str, str] = {}
#: The clusters (GCS address, session) whose authentication this process has probed.
_PROBED: set[tuple[str, str, bool]] = set()


def connect(address: str | None, dashboard: bool = False, allow_tokenless: bool = False) -> bool:
    """Make sure this process is connected to Ray: join `address`, or start a private local
    instance when it is None. Returns True when this call started or joined it (and the
    caller should `disconnect()` at the end), False when Ray was already initialised (it
    then gets the same readback: `readback_connected`)."""
    loaded = sys.modules.get("ray")
    if loaded is not None and loaded.is_initialized():
        # why: a process already connected keeps its Ray as it is (switching its
        # authentication mode under a live connection crashes Ray's clients in it), but
        # is checked as a new connection would be.
        readback_connected(address, allow_tokenless)
        return False
    if address is not None:
        address = join.resolve_address(address)
    else:
        _make_private()
    ray = require_ray()
    kwargs: dict[str, Any] = {"log_to_driver": True, "logging_level": "WARNING"}
    if address is None:
        if dashboard:
            _require_dashboard()
        privacy.clear_redirects()
        privacy.secure_token_file(create=True)
        temp_dir = privacy.private_temp_dir()
        _PRIVATE["temp_dir"] = temp_dir
        kwargs.update(include_dashboard=dashboard, _temp_dir=temp_dir)
        # why: Ray starts its workers at nice 15; gazelle's actors are the run's main work,
        # and at 15 they starve next to the learner (a 20 ms unroll took 500 ms on a busy
        # 2-core machine). A cluster started by `ray start` needs RAY_worker_niceness=0.
        kwargs["_system_config"] = {"worker_niceness": 0}
    else:
        privacy.secure_token_file(create=False)
        # why: an explicit address never turns token mode on by itself (`auto` may)
        sends = None if address == "auto" else os.environ.get(AUTH_ENV, "").lower() == "token"
        where = address if address != "auto" else join.auto_address()
        join.check_cluster_auth(where, allow_tokenless, sends)
    # why: gazelle's own processes need no Ray runtime env; workers import the installed
    # gazelle (on a real cluster every node installs it: docs/distributed.md).
    # why: "local" starts a new instance even when one runs here already (ray.init() with
    # no address would join a `ray start` instance or a test cluster without being asked).
    try:
        context = ray.init(address=address or "local", **kwargs)
    except BaseException as err:
        disconnect()
        refused = _cause(err, ray.exceptions.AuthenticationError)
        if address is not None and refused is not None:
            first = (str(refused).strip().splitlines() or [""])[0][:200]
            raise RunError(
                f"the Ray cluster at {address} refused this driver's token ({first}); set "
                f"{AUTH_ENV}=token and the cluster's token (docs/distributed.md)"
            ) from None
        if address is not None and isinstance(err, ConnectionError):
            raise RunError(f"cannot join the Ray cluster at {address}: {err}") from None
        raise
    if address is None:
        try:
            check_private(reported_addresses(context), token_auth_on())
            privacy.check_temp_dir(_PRIVATE["temp_dir"])
            privacy.secure_token_file(create=False)
            privacy.check_sockets()
        except BaseException:
            disconnect()
            raise
    return True


def _cause(error: BaseException, kind: type) -> BaseException | None:
    """`error` or the first exception of `kind` among its causes (Ray wraps an auth
    failure in a ConnectionError)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def disconnect() -> None:
    """`ray.shutdown()`, and remove a private instance's session folder."""
    import ray

    ray.shutdown()
    temp_dir = _PRIVATE.pop("temp_dir", None)
    if temp_dir is not None:
        privacy.remove_temp_dir(temp_dir)


def after_start() -> None:
    """Once the fleet's actors have started: the private instance's sockets again (its
    worker processes now listen too). A no-op when this process joined a cluster."""
    if _PRIVATE:
        privacy.check_sockets()


def readback_connected(address: str | None, allow_tokenless: bool) -> None:
    """A process that connected to Ray before the run: the cluster's authentication is
    probed as a joined one's (`check_cluster_auth`); an instance this process started
    itself must also be on loopback, with its sockets there."""
    import ray
    from ray._private import worker

    node = worker._global_node
    gcs = str(getattr(node, "gcs_address", "") or "")
    if address is not None and address != "auto":
        join.resolve_address(address)  # why: still refuses ray:// in one line
    # why: one probe per cluster and process: each run of a process that stays connected
    # (a notebook, a test session) would otherwise pay for a fresh interpreter each time
    session = (gcs, str(getattr(node, "session_name", "") or ""), allow_tokenless)
    if gcs and session not in _PROBED:
        join.check_cluster_auth(gcs, allow_tokenless)
        _PROBED.add(session)
    if address is None and getattr(node, "head", False):
        hosts = {"gcs": gcs.rsplit(":", 1)[0]}
        for info in ray.nodes():
            hosts[f"node {info.get('NodeID', '?')[:8]}"] = str(info.get("NodeManagerAddress"))
        check_private(hosts, token=True)
        privacy.check_sockets()


def _make_private() -> None:
    """Loopback and token for the instance this process is about to start, whether or not
    Ray was imported already."""
    privacy.loopback_only()
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
