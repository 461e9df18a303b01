"""docs/distributed.md's "Starting a cluster" recipe, walked on one machine: its commands are
read from the page and run as written, in a user's shell, with only what one machine needs
changed: the head's address and port (127.0.0.1 and a free port), `ray start` kept in the
foreground on loopback with a folder of its own (so the test can end it), a stand-in for
`ssh`/`scp` that copies into the driver's HOME, and a small run in place of Pong with 60
actors. Step 5 (more nodes) is not run. What it checks: the cluster answers no client
without a token, and the driver of step 6, with the token the recipe copied, joins it and
trains. A page that drops the token copy, or `RAY_AUTH_MODE=token` from the driver's step,
fails it. Ray 2.60's `ray start` turns token auth on by itself where `~/.ray/auth_token`
exists and RAY_AUTH_MODE is unset, so the head's `export` is checked on the page (the fast
test below), as older Rays and a head without the token file need it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "distributed.md"
#: The head's address in the recipe, replaced by the loopback one.
HEAD = "10.0.0.5:6379"

#: Bash for one node of the recipe: `ray start` in the foreground on loopback (its folder:
#: $FOLDER), `ssh HOST CMD` runs CMD as the driver (HOME=$DRIVER_HOME), `scp -p SRC
#: HOST:DEST` copies SRC to the driver's HOME.
PREAMBLE = r"""
set -euo pipefail
ray() {
  if [ "$1" = start ]; then
    shift
    command ray start "$@" --block --node-ip-address 127.0.0.1 --include-dashboard false \
      --disable-usage-stats --temp-dir "$FOLDER/r"
  else
    command ray "$@"
  fi
}
ssh() { shift; HOME="$DRIVER_HOME" bash -c "$*"; }
scp() {
  local args=()
  for a in "$@"; do
    case "$a" in -*) ;; *:*) args+=("$DRIVER_HOME/${a#*:}") ;; *) args+=("$a") ;; esac
  done
  cp -p "${args[@]}"
}
"""


def recipe_steps(text: str) -> dict[int, list[str]]:
    """Step number -> its command lines, from the first bash block under "## Starting a
    cluster" (comment-only lines and trailing comments dropped)."""
    section = text.split("## Starting a cluster", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block, "docs/distributed.md: no bash block under 'Starting a cluster'"
    steps: dict[int, list[str]] = {}
    step = 0
    for line in block.group(1).splitlines():
        numbered = re.match(r"#\s*(\d+)\.", line.strip())
        if numbered:
            step = int(numbered.group(1))
            continue
        command = re.split(r"\s+#\s", line.strip(), maxsplit=1)[0].strip()
        if command and not command.startswith("#"):
            steps.setdefault(step, []).append(command)
    return steps


def on_loopback(lines: list[str], port: int) -> str:
    """The lines with the head's address and port made the loopback cluster's, one CPU."""
    text = "\n".join(lines).replace(HEAD, f"127.0.0.1:{port}")
    text = re.sub(r"--port 6379\b", f"--port {port}", text)
    return re.sub(r"--num-cpus \d+", "--num-cpus 1", text)


def test_each_node_of_the_recipe_makes_copies_and_asks_for_the_token():
    """Fast, no Ray: step 2 makes the token (0600), step 3 copies it, and every step that
    starts Ray or gazelle (4, 5, 6) exports RAY_AUTH_MODE=token before it."""
    steps = recipe_steps(PAGE.read_text())
    assert any("ray get-auth-token --generate" in line for line in steps[2]), steps[2]
    assert "chmod 600 ~/.ray/auth_token" in steps[2], steps[2]
    assert any("~/.ray/auth_token" in line and "scp" in line for line in steps[3]), steps[3]
    for step in (4, 5, 6):
        lines = steps[step]
        starts = [i for i, line in enumerate(lines) if re.search(r"ray start|gazelle train", line)]
        assert starts, (step, lines)
        assert "export RAY_AUTH_MODE=token" in lines[: starts[0]], (step, lines)


def small_run(line: str, logdir: Path, small: list[str]) -> str:
    """Step 6's `gazelle train` line with the page's actors and env swapped for `small`."""
    line = re.sub(r"\s--num-actors \S+|\s--env \S+", "", line)
    return f"{line} {' '.join(small)} --total-frames 400 --logdir {logdir}"


@contextlib.contextmanager
def head_node(script: str, env: dict[str, str], folder: Path, port: int, log: Path):
    """Runs the head's steps (ending in the foreground `ray start`); yields once the cluster
    takes connections; ends every process that names its folder, then the script."""
    from test_ray_private import _accepts, _naming, wait_for

    with log.open("w") as out:
        head = subprocess.Popen(
            ["bash", "-c", script], env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            try:
                wait_for("the recipe's ray start", lambda: _accepts(port), 60, head)
            except AssertionError as err:
                raise AssertionError(f"{err}: {log.read_text()[-2000:]}") from None
            yield
        finally:
            for pid in [*_naming(str(folder)), head.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            head.wait(timeout=30)
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.ray
@pytest.mark.slow
def test_the_recipe_starts_a_token_cluster_that_its_driver_trains_on(tmp_path):
    pytest.importorskip("ray", reason="the ray tests need pip install -e '.[ray]'")
    from gazelle.backends.ray.probe import answers_without_token
    from test_ray_private import SMALL, clean_env, free_port

    steps = recipe_steps(PAGE.read_text())
    assert {2, 3, 4, 6} <= set(steps), steps
    port = free_port()
    # why: short, as Ray's socket paths under it must fit a Unix socket's 107 bytes
    folder = Path(tempfile.mkdtemp(prefix="gz-test-", dir="/tmp"))
    head_home, driver_home = tmp_path / "head", tmp_path / "driver"
    driver_home.mkdir()
    common = dict(FOLDER=str(folder), DRIVER_HOME=str(driver_home))
    common["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # why: keep 127.0.0.1 as given
    head_script = PREAMBLE + on_loopback([*steps[2], *steps[3], *steps[4]], port)
    driver_lines = on_loopback(steps[6], port).splitlines()
    driver_lines = [
        small_run(line, tmp_path / "run", SMALL) if line.startswith("gazelle train") else line
        for line in driver_lines
    ]
    assert any(line.startswith("gazelle train") for line in driver_lines), steps[6]
    driver_script = PREAMBLE + "\n".join(driver_lines)
    with head_node(
        head_script, clean_env(head_home, **common), folder, port, tmp_path / "head.log"
    ):
        token = driver_home / ".ray" / "auth_token"
        assert token.read_bytes() == (head_home / ".ray" / "auth_token").read_bytes()
        assert answers_without_token(f"127.0.0.1:{port}") is False, (
            "the recipe's cluster answers a client without a token"
        )
        driver = subprocess.Popen(
            ["bash", "-c", driver_script], env=clean_env(driver_home, **common),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            stdout, stderr = driver.communicate(timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.pid, signal.SIGKILL)  # why: its own group, started above
    assert driver.returncode == 0, (driver_script, stdout[-2000:], stderr[-3000:])
    assert "done: " in stdout, stdout[-2000:]
