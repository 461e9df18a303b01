"""What a user on a shared machine or a shared cluster gets from `--backend ray`, tried as
that user would: `gazelle train` from the command line, in an environment without the test
suite's settings (its own HOME, no RAY_* variable).

- A private instance (no --ray-address): every listening socket of its processes on
  loopback, its session files in a folder only the user can enter (0700), its token file
  0600, and a driver killed with SIGKILL mid-run resumes from a checkpoint at most one
  checkpoint interval old; a listener forced onto another address refuses the run.
- Joining a cluster started with `ray start --head` on loopback: one that answers a client
  without a token is refused (unless --ray-allow-tokenless), in one line, also for a
  process that connected to it itself; one with token authentication refuses a driver
  without its token in one line; `auto` with RAY_ADDRESS=ray://... is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gazelle.backends.ray.sockets import is_loopback, tree

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ray = pytest.importorskip("ray", reason="the ray tests need pip install -e '.[ray]'")

GAZELLE = [
    shutil.which("gazelle") or sys.executable,
    *([] if shutil.which("gazelle") else ["-m", "gazelle.cli"]),
]
SMALL = ["--env", "CartPole-v1", "--num-actors", "1", "--envs-per-actor", "2",
         "--batch-size", "2", "--log-interval-s", "1"]  # fmt: skip


#: What a process that joins a loopback cluster with its own `ray.init` needs (else Ray
#: swaps 127.0.0.1 for the machine's address, where the cluster does not listen).
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell: PATH, LANG and the tree under test (PYTHONPATH), a HOME of its own
    (no ~/.ray yet), no variable of conftest's or Ray's."""
    home.mkdir(parents=True, exist_ok=True)
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "PYTHONPATH") if k in os.environ}
    return {**keep, "HOME": str(home), **extra}


def listening(pids: set[int]) -> list[str]:
    """`ADDR:PORT` of every listening TCP socket of `pids`, as `ss -ltnp` shows them (not
    gazelle's own reading of /proc)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    return [
        line.split()[3] for line in out.splitlines() if any(f"pid={pid}," in line for pid in pids)
    ]


def session_folders(pids: set[int]) -> set[Path]:
    """The private folders (`/tmp/gz-ray-*`) named on the command lines of `pids`."""
    found = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                text = arg.decode(errors="replace")
                if "/gz-ray-" in text:
                    head, _, rest = text.partition("/gz-ray-")
                    found.add(Path(head.split("=")[-1] + "/gz-ray-" + rest.split("/")[0]))
    return found


def _is_agent(pid: int) -> bool:
    """Whether `pid` is one of Ray's agents (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`)."""
    try:
        return b"Agent" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def alive(pids: set[int]) -> set[int]:
    from procfs import running

    return {pid for pid in pids if running(pid)}


def wait_for(what, condition, seconds: float, process=None):
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the run ended ({process.returncode}) first")
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.5)


def checkpoint_frames(path: Path) -> int:
    from gazelle.checkpoint import load

    return int(load(path)["frames"])


def test_a_private_run_is_private_and_its_driver_killed_mid_run_resumes(tmp_path):
    """IMPALA on a private instance (`--checkpoint-interval-s 2`): while it trains, every
    listening socket of the driver and its Ray processes is on loopback, the session folder
    is 0700 and the token file (made by gazelle in a HOME without one) 0600. SIGKILL the
    driver: Ray's processes go with it, the last checkpoint was at most one interval (plus
    a save) old, and the same command resumes from it, taking over the dead run's lock; the
    resumed run removes its session folder when it ends."""
    home, run = tmp_path / "home", tmp_path / "run"
    env = clean_env(home)
    interval = 2.0
    args = ["train", "--backend", "ray", *SMALL, "--checkpoint-interval-s", str(interval),
            "--logdir", str(run)]  # fmt: skip
    first = subprocess.Popen(
        [*GAZELLE, *args, "--total-frames", "100000000"], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, text=True,
    )  # fmt: skip
    ckpt, pids, folders = run / "checkpoint.pt", set(), set()
    try:
        # mid-run: two periodic checkpoints written, the run still training
        mtimes: set[float] = set()
        wait_for(
            "two periodic checkpoints",
            lambda: (ckpt.exists() and mtimes.add(ckpt.stat().st_mtime)) or len(mtimes) >= 2,
            240,
            first,
        )
        pids = tree(first.pid)
        folders = session_folders(pids)
        sockets = listening(pids)
        killed_at = time.time()
        age = killed_at - ckpt.stat().st_mtime
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        output = first.stdout.read() if first.stdout else ""
    assert len(sockets) >= 3, (sockets, output[-2000:])  # the driver, the GCS, the raylet
    exposed = [s for s in sockets if not is_loopback(s.rsplit(":", 1)[0])]
    assert not exposed, (exposed, sockets)
    assert len(folders) == 1, folders
    folder = folders.pop()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
    token = home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    # one checkpoint interval, plus the time one save takes, at most
    assert age <= interval + 1.5, age
    saved = checkpoint_frames(ckpt)
    # what the driver started goes with it: the GCS, the raylet, the workers within
    # seconds; Ray's two agents (dashboard, runtime env) about a minute later, after trying
    # to report to the dead GCS (measured: 60-80 s), so they are not waited for here
    core = {pid for pid in pids if not _is_agent(pid)}
    try:
        wait_for("the dead driver's Ray processes to exit", lambda: not alive(core), 30)
    finally:
        for pid in alive(pids):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)  # a killed driver cannot remove it
    resumed = subprocess.Popen(
        [*GAZELLE, *args, "--total-frames", str(saved + 2000)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True,
    )  # fmt: skip
    seen: set[Path] = set()
    try:
        deadline = time.monotonic() + 240
        while resumed.poll() is None and time.monotonic() < deadline:
            seen |= session_folders(tree(resumed.pid))
            time.sleep(0.5)
    finally:
        if resumed.poll() is None:
            os.killpg(resumed.pid, signal.SIGKILL)
        output, _ = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, output[-3000:]
    assert f"resumed from {ckpt} at {saved:,} frames" in output, output[-3000:]
    assert (
        f"taking over the lock of a run that ended without releasing it (pid {first.pid}" in output
    )
    rows = [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines()]
    assert rows[-1]["frames"] >= saved + 2000
    assert seen and not any(path.exists() for path in seen), seen  # removed at the end


#: Test only, put on PYTHONPATH as `sitecustomize`: a Ray worker process that also listens
#: on every address, from its start (a prestarted worker: the check after `ray.init` sees
#: it) or once it becomes an actor (it imports gazelle's actor host: only the check once
#: the actors run sees it).
SITECUSTOMIZE = {
    "at start-up": """\
import socket, sys
if any("default_worker.py" in arg for arg in sys.argv):
    _exposed = socket.socket()
    _exposed.bind(("0.0.0.0", 0))
    _exposed.listen()
""",
    "once the actors run": """\
import socket, sys
class _OnActorImport:
    def find_spec(self, name, path=None, target=None):
        if name == "gazelle.backends.ray.hosts" and not hasattr(sys, "_gz_exposed"):
            sys._gz_exposed = socket.socket()
            sys._gz_exposed.bind(("0.0.0.0", 0))
            sys._gz_exposed.listen()
if any("default_worker.py" in arg for arg in sys.argv):
    sys.meta_path.insert(0, _OnActorImport())
""",
}


@pytest.mark.parametrize("when", list(SITECUSTOMIZE))
def test_a_listener_forced_beyond_loopback_refuses_the_run_and_a_readable_token_is_fixed(
    tmp_path, when
):
    """A Ray worker process of the private instance listens on 0.0.0.0 (a `sitecustomize`
    on PYTHONPATH opens the socket, at the worker's start or once it hosts an actor):
    gazelle's socket check refuses the run in one line (exit code 1) naming that process,
    and stops Ray. The token file found readable by others (0644, as Ray itself writes it
    under umask 022) is made 0600 first."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE[when])
    home = tmp_path / "home"
    token = home / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    token.write_text("a" * 32)
    token.chmod(0o644)
    env = clean_env(home)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [*GAZELLE, "train", "--backend", "ray", *SMALL, "--total-frames", "100000000",
         "--max-seconds", "60", "--logdir", str(tmp_path / "run")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    err = [line for line in done.stderr.strip().splitlines() if "gazelle train:" in line]
    assert done.returncode == 1, (done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr and len(err) == 1, done.stderr[-3000:]
    assert "listens beyond loopback" in err[0] and "0.0.0.0:" in err[0], err
    # which check refused it: the one right after `ray.init` (before the run wrote its
    # config), or the one once every actor started (after)
    assert (tmp_path / "run" / "config.json").exists() is (when == "once the actors run")
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert "was readable by others (mode 0644); made it 0600" in done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def ray_start(tmp_path: Path, token: str | None):
    """`ray start --head --block` on loopback (its own temp folder and port); torn down
    after: every process that names its folder, then that command, killed by pid (a
    SIGTERM would have it drain for 30 s)."""
    import tempfile

    # why: short, as Ray's socket paths under it must fit a Unix socket's 107 bytes
    folder = Path(tempfile.mkdtemp(prefix="gz-test-", dir="/tmp"))
    port = free_port()
    env = clean_env(tmp_path / "cluster-home", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token) if token else env.update(
        RAY_AUTH_MODE="disabled"
    )
    log = (tmp_path / "ray-start.log").open("w")
    head = subprocess.Popen(
        ["ray", "start", "--head", "--block", "--port", str(port), "--node-ip-address",
         "127.0.0.1", "--num-cpus", "1", "--include-dashboard", "false",
         "--disable-usage-stats", "--temp-dir", str(folder / "r")],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        started = lambda: _accepts(port)  # noqa: E731
        try:
            wait_for(f"ray start at {address}", started, 120, head)
        except AssertionError as err:
            log_text = (tmp_path / "ray-start.log").read_text()[-2000:]
            raise AssertionError(f"{err}: {log_text}") from None
        yield address
    finally:
        for pid in [*_naming(str(folder)), head.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        head.wait(timeout=30)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _accepts(port: int) -> bool:
    """Whether something on 127.0.0.1 takes connections on `port` (the GCS, once up)."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
        return True
    return False


def _naming(text: str) -> list[int]:
    """Processes whose command line contains `text` (what a `ray start` left)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def join(address: str, tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess:
    """`gazelle train --backend ray --ray-address ADDRESS` as a user starts it."""
    return subprocess.run(
        [*GAZELLE, "train", "--backend", "ray", "--ray-address", address, *SMALL,
         "--total-frames", "400", "--logdir", str(tmp_path / "run"), "--no-resume", *flags],
        env=clean_env(tmp_path / "home", **env), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess, code: int) -> str:
    assert done.returncode == code, (done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def test_a_cluster_that_answers_without_a_token_is_refused_unless_allowed(tmp_path):
    """A cluster started with RAY_AUTH_MODE=disabled: the probe gets an answer without a
    token; joining it is refused in one line (RAY_* variables that would redirect Ray
    cleared first, and said), also for a process that connected to it itself; with
    --ray-allow-tokenless the run joins, warns in one line and trains."""
    from gazelle.backends.ray.probe import answers_without_token

    with ray_start(tmp_path, token=None) as address:
        assert answers_without_token(address) is True
        refused = join(address, tmp_path, RAY_REDIS_ADDRESS="10.9.9.9:6379")
        line = one_line(refused, 1)
        assert "refusing to join" in line and address in line and "--ray-allow-tokenless" in line
        assert "cleared RAY_REDIS_ADDRESS" in refused.stdout
        connected = subprocess.run(
            [sys.executable, "-c", "import ray, sys\n"
             f"ray.init(address={address!r}, logging_level='ERROR')\n"
             "from gazelle.backends.ray.cluster import connect\n"
             "from gazelle.errors import RunError\n"
             "try:\n    connect(None)\nexcept RunError as err:\n    print(err)\n"
             "    sys.exit(3)\n"],
            env=clean_env(tmp_path / "home", RAY_AUTH_MODE="disabled", **LOOPBACK),
            capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert connected.returncode == 3, connected.stderr[-2000:]
        assert "refusing to join" in connected.stdout
        allowed = join(address, tmp_path, "--ray-allow-tokenless")
        assert allowed.returncode == 0, allowed.stderr[-3000:]
        assert "answers clients without a token" in allowed.stderr
        assert "done: " in allowed.stdout


def test_a_token_cluster_refuses_a_driver_without_its_token_in_one_line(tmp_path):
    """A cluster started with token authentication: the probe is refused; a driver that
    joins without the token (RAY_AUTH_MODE unset: an explicit address never turns it on)
    is refused before it tries, in one line saying what to set (Ray would retry for ~30 s,
    then raise)."""
    from gazelle.backends.ray.probe import answers_without_token

    with ray_start(tmp_path, token="b" * 32) as address:
        assert answers_without_token(address) is False
        line = one_line(join(address, tmp_path), 1)
        assert f"the Ray cluster at {address} wants a token and this driver sends none" in line


def test_ray_client_addresses_are_refused_even_through_auto(tmp_path):
    """`--ray-address auto` reads RAY_ADDRESS first (as Ray does): a ray:// there is Ray
    Client, refused in one line like a ray:// given as the flag."""
    line = one_line(join("auto", tmp_path, RAY_ADDRESS="ray://127.0.0.1:10001"), 2)
    assert "--ray-address: invalid value 'ray://127.0.0.1:10001'" in line


def test_a_private_instance_is_private_whatever_was_imported_first(tmp_path):
    """`connect(None)` in a fresh interpreter that imported Ray first, with an environment
    that asks Ray for a reachable address and no token: every port Ray opens is still on
    127.0.0.1 (read from the kernel too), token authentication is on, no dashboard runs;
    `disconnect()` stops it and removes its session folder."""
    code = (
        "import os, ray  # first, before gazelle could set anything\n"
        "from gazelle.backends.ray import cluster, privacy\n"
        "assert cluster.connect(None)\n"
        "print('node', ray.nodes()[0]['NodeManagerAddress'])\n"
        "print('token', cluster.token_auth_on())\n"
        "print('dashboard', ray._private.worker.global_worker.node.webui_url)\n"
        "print('sockets', len(privacy.check_sockets()))\n"
        "folder = os.path.dirname(cluster._PRIVATE['temp_dir'])\n"
        "cluster.disconnect()\n"
        "print('removed', not os.path.exists(folder))\n"
    )
    env = clean_env(tmp_path / "home", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1")
    env["RAY_AUTH_MODE"] = "disabled"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["node"] == "127.0.0.1"
    assert lines["token"] == "True"
    assert lines["dashboard"] in ("None", "")
    assert int(lines["sockets"]) >= 3 and lines["removed"] == "True"
