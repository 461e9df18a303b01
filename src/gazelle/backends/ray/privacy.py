"""What keeps a Ray instance private to the user on a shared machine, beyond loopback.

Loopback keeps other machines out, not the other users of this one. So a private instance
also gets:

- a session folder only the user can enter: Ray makes its temp dir and session folders
  world-writable (0777, no sticky bit), where another local user could replace the raylet
  or plasma socket or the `session_latest` link; gazelle gives Ray a folder inside one of
  its own, made 0700 (`private_temp_dir`), and removes it when the run ends;
- a token file only the user can read (`secure_token_file`): Ray writes
  `~/.ray/auth_token` with the process umask (0644 under umask 022), readable by everyone
  who can enter the home folder; gazelle writes it 0600 itself when there is none, and
  makes an existing one 0600 (one line), or refuses one it cannot (owned by another user);
- no `RAY_*` variable that sends Ray's state or connection elsewhere, or runs code at its
  start (`clear_redirects`): cleared, with one line naming them;
- the real listening sockets of its processes, read from the kernel after start-up, all
  on loopback (`check_sockets`; `gazelle.backends.ray.sockets`).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from gazelle.backends.ray import sockets
from gazelle.errors import RunError

#: `RAY_*` variables that point Ray at another cluster, put its state somewhere else, send
#: data out, or run a hook (code) when Ray starts: a private run clears them, and so does a
#: run that joins `--ray-address` (after reading RAY_ADDRESS for `auto`).
REDIRECTS = (
    "RAY_ADDRESS",
    "RAY_REDIS_ADDRESS",
    "RAY_API_SERVER_ADDRESS",
    "RAY_DASHBOARD_ADDRESS",
    "RAY_HEAD_IP",
    "RAY_TMPDIR",
    "RAY_TEMPDIR",
    "RAY_STORAGE",
    "RAY_HOSTDIR",
    "RAY_JOB_CONFIG_JSON_ENV_VAR",
    "RAY_USAGE_STATS_REPORT_URL",
    "RAY_OVERRIDE_DASHBOARD_URL",
    "RAY_object_spilling_config",
    "RAY_external_storage_namespace",
)
#: ... and every `RAY_*_HOOK` (RAY_RUNTIME_ENV_HOOK, RAY_START_HOOK, RAY_JOB_SUBMIT_HOOK):
#: an import path Ray calls.
HOOK_SUFFIX = "_HOOK"

TOKEN_ENV, TOKEN_PATH_ENV = "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


#: Ray's switch for multi-node clusters; "0" makes a Ray instance take 127.0.0.1 as its node
#: address, and every Ray process binds its ports to that address.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only() -> None:
    """Ray on 127.0.0.1 only, for this process and the ones it starts, whether or not Ray
    was imported already."""
    # why: Ray reads LOOPBACK_ENV into a module constant at its first import, and its
    # processes (GCS, raylet, workers) read it from the environment they inherit; set both.
    os.environ[LOOPBACK_ENV] = "0"
    constants: Any = sys.modules.get("ray._private.ray_constants")
    if constants is not None and hasattr(constants, "ENABLE_RAY_CLUSTER"):
        constants.ENABLE_RAY_CLUSTER = False


def clear_redirects(environ: dict[str, str] | None = None) -> list[str]:
    """Remove `REDIRECTS` and `RAY_*_HOOK` from `environ` (default: this process's, which
    Ray's processes inherit); one line names what went. Returns their names."""
    env = os.environ if environ is None else environ
    names = sorted(
        name
        for name in env
        if name in REDIRECTS or (name.startswith("RAY_") and name.endswith(HOOK_SUFFIX))
    )
    for name in names:
        del env[name]
    if names:
        print(
            f"gazelle: cleared {', '.join(names)} for this run: they would send Ray's state or "
            "connection elsewhere, or run code when Ray starts"
        )
    return names


#: The longest temp folder a Ray session fits under: its sockets' paths (the folder, then
#: `r/session_<date>_<time>_<pid>/sockets/plasma_store`, ~70 characters) must stay within
#: the 107 bytes a Unix socket's path may have.
MAX_BASE = 36


def private_temp_dir() -> str:
    """A new folder only this user can enter (0700), with the path to give Ray as its temp
    dir inside it (Ray makes that one and its session folders 0777)."""
    base = tempfile.gettempdir()
    if len(base) > MAX_BASE and os.access("/tmp", os.W_OK):
        base = "/tmp"  # why: a long TMPDIR (a CI's, pytest's) would not fit the sockets
    outer = tempfile.mkdtemp(prefix="gz-ray-", dir=base)  # why: mkdtemp makes it 0700
    return os.path.join(outer, "r")


def remove_temp_dir(temp_dir: str) -> None:
    """Remove what `private_temp_dir` made (after `ray.shutdown()`)."""
    shutil.rmtree(os.path.dirname(temp_dir), ignore_errors=True)


def check_temp_dir(temp_dir: str) -> None:
    """Refuse (one line) a session folder that others may enter: the folder around Ray's
    temp dir must be this user's, 0700."""
    outer = Path(temp_dir).parent
    info = outer.stat()
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise RunError(
            f"refusing to train: the private Ray instance's session folder {outer} can be "
            f"entered by other users (mode {stat.S_IMODE(info.st_mode):04o}); report this"
        )


def token_path() -> Path | None:
    """The file Ray reads its token from (None: the token is in RAY_AUTH_TOKEN itself)."""
    if os.environ.get(TOKEN_ENV):
        return None
    given = os.environ.get(TOKEN_PATH_ENV)
    return Path(given).expanduser() if given else Path.home() / ".ray" / "auth_token"


def secure_token_file(create: bool) -> None:
    """Make the token file this user's alone: with `create`, write one (0600, its folder
    0700 when new) where there is none; make an existing one 0600 with one line; refuse
    (one line) one owned by another user or that cannot be changed."""
    path = token_path()
    if path is None:
        return
    if not path.exists():
        if create:
            try:
                _write_token(path)
            except OSError as err:
                raise RunError(
                    f"cannot write a Ray token to {path} ({err.strerror}); set "
                    f"{TOKEN_PATH_ENV} to a file of yours, or {TOKEN_ENV}"
                ) from err
        return
    info = path.stat()
    if info.st_uid != os.getuid():
        raise RunError(
            f"refusing to use the Ray token in {path}: it belongs to another user (uid "
            f"{info.st_uid}); make your own (ray get-auth-token --generate) or set "
            f"{TOKEN_PATH_ENV}"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        try:
            os.chmod(path, 0o600)
        except OSError as err:
            raise RunError(
                f"refusing to use the Ray token in {path}: others can read it (mode "
                f"{mode:04o}) and it cannot be made 0600 ({err.strerror})"
            ) from err
        print(f"gazelle: {path} was readable by others (mode {mode:04o}); made it 0600")


def _write_token(path: Path) -> None:
    """A new token, written 0600 from the start (never readable by others, not even for a
    moment), for Ray to load."""
    from ray._private.authentication.authentication_token_generator import (
        generate_new_authentication_token,
    )
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
    token = generate_new_authentication_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    # why: Ray caches "no token" once it looked; make it read the file now there.
    AuthenticationTokenLoader.instance().reset_cache()


def ray_processes() -> set[int]:
    """This process (the driver) and every process of the Ray instance it started (the
    GCS, the raylet and what they start: agents, workers), by pid."""
    from ray._private import worker

    pids = {os.getpid()}
    node = getattr(worker, "_global_node", None)
    started = getattr(node, "all_processes", None) or {}
    for infos in started.values():
        for info in infos:
            process = getattr(info, "process", None)
            if process is not None and process.pid:
                pids |= sockets.tree(process.pid)
    return pids


def check_sockets(pids: set[int] | None = None) -> list[sockets.Listener]:
    """Refuse (one line) when one of `pids` (default: `ray_processes()`) listens beyond
    loopback; returns what they listen on. A no-op without `/proc`."""
    if not sockets.available():
        return []
    found = sockets.listening(ray_processes() if pids is None else pids)
    exposed = [s for s in found if not sockets.is_loopback(s.host)]
    if exposed:
        listed = "; ".join(str(s) for s in exposed[:4])
        more = f" and {len(exposed) - 4} more" if len(exposed) > 4 else ""
        raise RunError(
            f"refusing to train: a process of the private Ray instance listens beyond "
            f"loopback ({listed}{more}); anything that can reach it could run code here; "
            "report this"
        )
    return found
