"""Does a Ray cluster answer a client that has no token? Asked, not assumed.

A driver's own authentication mode says nothing about the cluster's: a cluster started
without token authentication accepts any token, so a driver with `RAY_AUTH_MODE=token` (or
one that found `~/.ray/auth_token` and turned token mode on by itself) joins it as if it
were protected. `answers_without_token(address)` asks the cluster's GCS for its keys from a
fresh interpreter with authentication off and no token (the process's own Ray keeps its
mode: switching it under a live connection crashes Ray's clients): an answer means anyone
who reaches the address can drive the cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys

from gazelle.errors import RunError

#: Exit codes of `PROBE`.
OPEN, NEEDS_TOKEN = 0, 10

PROBE = """\
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1]).internal_kv_keys(b"", None, timeout=5)
except AuthenticationError:
    sys.exit(10)
except Exception as error:
    print(type(error).__name__ + ": " + str(error).splitlines()[0], file=sys.stderr)
    sys.exit(11)
"""

#: How long the probe may take (a GCS that does not answer takes Ray ~40 s to give up).
TIMEOUT_S = 30.0


def answers_without_token(address: str, timeout_s: float = TIMEOUT_S) -> bool:
    """Whether the cluster whose GCS is at `address` (`HOST:PORT`) answers a client without
    a token. Raises `RunError` (one line) when it cannot be reached at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    env["RAY_AUTH_MODE"] = "disabled"
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, address],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise RunError(
            f"the Ray cluster at {address} did not answer within {timeout_s:g} s; check "
            "--ray-address (HOST:PORT of its head's GCS) and that it runs"
        ) from None
    if done.returncode == OPEN:
        return True
    if done.returncode == NEEDS_TOKEN:
        return False
    why = (done.stderr.strip().splitlines() or ["no answer"])[-1][:300]
    raise RunError(f"cannot reach the Ray cluster at {address} ({why}); check --ray-address")
