"""Joining a cluster someone else runs (`--ray-address`): the address read as Ray reads it,
and the cluster's authentication asked, not assumed (`gazelle.backends.ray.probe`)."""

from __future__ import annotations

import os
import sys

from gazelle.backends.ray import privacy
from gazelle.backends.ray.sockets import is_loopback
from gazelle.config import ConfigError
from gazelle.errors import RunError


def resolve_address(address: str) -> str:
    """`--ray-address` as Ray would read it: `auto` takes RAY_ADDRESS when set; then a
    `ray://` address (Ray Client) is refused, and the `RAY_*` variables that redirect Ray
    are cleared (`privacy.clear_redirects`). `auto` without RAY_ADDRESS stays `auto` (Ray
    finds the cluster on this machine and turns token mode on when a token exists)."""
    if address == "auto" and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
    if "://" in address:
        raise ConfigError(
            "ray_address",
            address,
            "HOST:PORT of the cluster's head (its GCS, `ray start --head --port`) or auto, "
            "with gazelle started on a node of the cluster; Ray Client (ray://) is not "
            "supported, as the learner must receive every unroll",
        )
    privacy.clear_redirects()
    if is_loopback(address.rsplit(":", 1)[0]):
        # why: Ray swaps a loopback address for this machine's network address unless told
        # that the cluster is on loopback (it then waited ~40 s per try for a GCS that only
        # listens on 127.0.0.1)
        privacy.loopback_only()
    return address


def auto_address() -> str:
    """The GCS address `auto` finds on this machine (a one-line error when there is none)."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except (ConnectionError, ValueError) as err:
        raise ConfigError(
            "ray_address", "auto", "HOST:PORT of a running cluster's head", problem=str(err)
        ) from None
    if not found:
        raise ConfigError(
            "ray_address", "auto", "HOST:PORT", problem="no Ray cluster runs on this machine"
        )
    return found


def check_cluster_auth(
    address: str, allow_tokenless: bool, driver_sends_token: bool | None = None
) -> None:
    """Refuse (one line) a cluster that answers a client without a token, unless allowed
    (`--ray-allow-tokenless`: then one warning line); and one that wants a token from a
    driver that will send none (`driver_sends_token` False; None: not known yet)."""
    from gazelle.backends.ray.probe import answers_without_token

    if not answers_without_token(address):
        if driver_sends_token is False:
            # why: Ray would retry for ~30 s, a warning line a second, then raise
            raise RunError(
                f"the Ray cluster at {address} wants a token and this driver sends none: set "
                "RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN, "
                "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token; docs/distributed.md)"
            )
        return
    what = (
        f"the Ray cluster at {address} answers clients without a token: anyone who can "
        "reach it can run code on its nodes"
    )
    if not allow_tokenless:
        raise RunError(
            f"refusing to join: {what}; start it with RAY_AUTH_MODE=token (docs/distributed.md) "
            "or pass --ray-allow-tokenless"
        )
    print(f"gazelle: warning: {what} (--ray-allow-tokenless)", file=sys.stderr)
