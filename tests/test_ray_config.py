"""The Ray backend's settings and errors, without a cluster: a clear one-line error when
Ray is missing or a Ray flag comes without `--backend ray`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from gazelle.config import Config, ConfigError
from gazelle.config.validation import validate


def test_ray_missing_is_a_one_line_error_naming_the_install(monkeypatch):
    from gazelle.backends.ray import cluster

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(ConfigError) as error:
        cluster.require_ray()
    message = str(error.value)
    assert "'.[ray]'" in message and "\n" not in message


def test_the_cli_says_so_in_one_line_without_a_traceback(tmp_path):
    """`gazelle train --backend ray` with Ray hidden from the interpreter."""
    code = (
        "import importlib.util, sys; real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, *a: None if n == 'ray' else real(n, *a)\n"
        "from gazelle.cli import main\n"
        f"sys.exit(main(['train', '--backend', 'ray', '--logdir', r'{tmp_path}',"
        " '--total-frames', '100']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    assert "pip install -e '.[ray]'" in out.stderr + out.stdout


@pytest.mark.parametrize("flag", [{"ray_address": "10.0.0.1:6379"}, {"ray_dashboard": True}])
def test_a_ray_flag_without_the_ray_backend_is_an_error(flag):
    with pytest.raises(ConfigError, match="only with --backend ray"):
        validate(Config.of(env="CartPole-v1", **flag))


def test_ray_actor_cpus_must_be_positive():
    with pytest.raises(ConfigError, match=r"--ray-actor-cpus: invalid value 0\.0"):
        validate(Config.of(env="CartPole-v1", backend="ray", ray_actor_cpus=0.0))


ray = pytest.importorskip("ray", reason="the ray tests need pip install -e '.[ray]'")


def test_a_ray_client_address_is_a_one_line_error():
    from gazelle.backends.ray.cluster import connect

    with pytest.raises(ConfigError, match=r"^--ray-address: invalid value 'ray://10\.0\.0\.5") as e:
        connect("ray://10.0.0.5:10001")
    assert "not supported" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("[::ffff:127.0.0.1]", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("*", False), ("192.0.2.2", False), ("", False), ("::", False)],
)  # fmt: skip
def test_loopback_addresses(host, loopback):
    from gazelle.backends.ray.cluster import is_loopback

    assert is_loopback(host) is loopback


def test_a_private_instance_that_reports_an_exposed_address_or_no_token_is_refused():
    from gazelle.backends.ray.cluster import check_private
    from gazelle.errors import RunError

    private = {"node": "127.0.0.1", "gcs": "127.0.0.1", "node 1a2b3c4d": "127.0.0.1"}
    check_private(private, token=True)  # no error
    with pytest.raises(RunError, match=r"not on loopback \(gcs 192\.0\.2\.2\)"):
        check_private({**private, "gcs": "192.0.2.2"}, token=True)
    with pytest.raises(RunError, match="without token authentication"):
        check_private(private, token=False)


def test_an_old_ray_is_refused_naming_the_supported_range(monkeypatch):
    from gazelle.backends.ray import cluster

    monkeypatch.setattr(ray, "__version__", "2.58.0")
    with pytest.raises(ConfigError, match=r"Ray 2\.58\.0 is installed.*ray>=2\.59,<3"):
        cluster.require_ray()


def test_the_dashboard_without_its_packages_says_what_to_install(tmp_path):
    """`gazelle train --backend ray --ray-dashboard` where Ray's dashboard packages
    (`ray[default]`) cannot be imported: one line naming the install, no traceback."""
    code = (
        "import sys; sys.modules['aiohttp'] = None  # as if ray[default] were not installed\n"
        "from gazelle.cli import main\n"
        f"sys.exit(main(['train', '--backend', 'ray', '--ray-dashboard', '--logdir',"
        f" r'{tmp_path}', '--total-frames', '100']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr
    assert "--ray-dashboard" in out.stderr and "ray[default]" in out.stderr


def test_redirecting_ray_variables_are_cleared_in_one_line(capsys):
    """`RAY_*` variables that point Ray elsewhere or run code at its start are cleared for
    a run (a private one, or one that joins); Ray's other settings stay."""
    from gazelle.backends.ray.privacy import clear_redirects

    env = {"RAY_ADDRESS": "10.9.9.9:6379", "RAY_REDIS_ADDRESS": "x", "RAY_TMPDIR": "/x",
           "RAY_RUNTIME_ENV_HOOK": "evil:hook", "RAY_worker_niceness": "0",
           "HOME": "/h"}  # fmt: skip
    assert clear_redirects(env) == [
        "RAY_ADDRESS", "RAY_REDIS_ADDRESS", "RAY_RUNTIME_ENV_HOOK", "RAY_TMPDIR"
    ]  # fmt: skip
    assert env == {"RAY_worker_niceness": "0", "HOME": "/h"}
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "cleared RAY_ADDRESS, RAY_REDIS_ADDRESS" in out


def test_the_socket_check_reads_what_the_kernel_says():
    """`/proc` read right: a socket listening on 0.0.0.0 (and one on ::) in this process is
    found with its address and refused; one on 127.0.0.1 passes."""
    import socket

    from gazelle.backends.ray import privacy, sockets
    from gazelle.errors import RunError

    if not sockets.available():
        pytest.skip("no /proc/net here")
    me = {os.getpid()}
    with socket.socket() as local:
        local.bind(("127.0.0.1", 0))
        local.listen()
        port = local.getsockname()[1]
        found = privacy.check_sockets(me)
        assert any(s.port == port and s.host == "127.0.0.1" for s in found), found
        with socket.socket() as exposed, socket.socket(socket.AF_INET6) as exposed6:
            exposed.bind(("0.0.0.0", 0))
            exposed.listen()
            exposed6.bind(("::", 0))
            exposed6.listen()
            with pytest.raises(RunError, match=r"listens beyond loopback .*tcp 0\.0\.0\.0:") as e:
                privacy.check_sockets(me)
            assert f"tcp [::]:{exposed6.getsockname()[1]}" in str(e.value)


class _SilentMethod:
    def remote(self, *args):
        return "a call ref"


class _SilentServer:
    """A parameter-server actor handle whose every method is called (picklable)."""

    def __getattr__(self, name):
        return _SilentMethod()


def test_a_parameter_server_that_went_unanswered_fails_the_calls_after_at_once(monkeypatch):
    """A3C on Ray: once a call to the parameter server went unanswered for --actor-timeout-s,
    the run stops, and its last reads of the server (its counts, the final checkpoint, the
    shutdown) raise the same one-line error at once instead of each waiting the timeout
    again; a worker started after it (a pickled copy) finds the silence for itself."""
    import pickle

    from gazelle.backends.ray.param_server import RayParameterServer
    from gazelle.errors import RunError

    waited: list[float] = []

    def unanswered(ref, timeout):
        waited.append(timeout)
        raise ray.exceptions.GetTimeoutError("timed out")

    monkeypatch.setattr(ray, "get", unanswered)
    server = RayParameterServer(_SilentServer(), timeout_s=120.0)
    for read in (lambda: server.step_count, server.state_dict, lambda: server.frame_count):
        with pytest.raises(RunError, match=r"^the A3C parameter server gave no answer in 120 s"):
            read()
    assert waited == [120.0]  # the first call waited; the two after it did not
    copy = pickle.loads(pickle.dumps(server))
    with pytest.raises(RunError, match="gave no answer"):
        copy.state_dict()
    assert waited == [120.0, 120.0]


def test_the_shutdown_after_a_silent_parameter_server_still_kills_it_and_stops_private_ray(
    monkeypatch,
):
    """A3C on Ray: the fleet's shutdown reads the server's last counts first; when that read
    raises (a silent server), the error still reaches the run, and the server is killed and
    a Ray instance the run started stopped all the same (they were left behind before)."""
    import gazelle.backends.ray.cluster as cluster
    from gazelle.backends.ray.param_server import RayParameterServer
    from gazelle.backends.ray.workers import RayWorkerFleet
    from gazelle.errors import RunError

    def unanswered(ref, timeout):
        raise ray.exceptions.GetTimeoutError("timed out")

    monkeypatch.setattr(ray, "get", unanswered)
    killed, disconnected = [], []
    monkeypatch.setattr(cluster, "disconnect", lambda: disconnected.append(True))
    handle = _SilentServer()
    fleet = object.__new__(RayWorkerFleet)
    fleet.server = RayParameterServer(handle, timeout_s=5.0)
    fleet._ray = SimpleNamespace(kill=lambda h, no_restart: killed.append((h, no_restart)))
    fleet.runs, fleet.owns_ray = [object(), object()], True
    with pytest.raises(RunError, match="gave no answer in 5 s"):
        fleet.shutdown()
    assert killed == [(handle, True)] and disconnected == [True]
    assert fleet.server.handle is None and fleet.server.closed and fleet.runs == [None, None]
