"""The Ray backend's settings and errors, without a cluster: a clear one-line error when
Ray is missing or a Ray flag comes without `--backend ray`."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

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
