"""The default command on a task that needs memory says so (issue 58, "memory at defaults").

`gazelle train` at the vector defaults trains a memoryless agent (the vector presets have no
LSTM). On `gazelle/Memory-v0` (the reward needs a cue seen 1-30 steps earlier) such an agent
learns nothing; the run must say that the task seems to need memory and name `--use-lstm`
(`gazelle.runtime.memory_check`). On CartPole (Markov in its observation) it must not: the
CartPole learning test (tests/test_learning.py) checks that. The run is the user's command
through the CLI, in a subprocess, for the frames of the check's
window (`WINDOW` batches of the preset's 16 x 20 steps). Verdicts over seeds:
docs/notes/lstm.md, "Memory at defaults".
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gazelle.runtime.memory_check import WINDOW

pytestmark = [pytest.mark.learning, pytest.mark.slow]

GAZELLE = [
    shutil.which("gazelle") or sys.executable,
    *([] if shutil.which("gazelle") else ["-m", "gazelle.cli"]),
]
#: The vector preset's batch (16 unrolls of 20 steps) times the check's window, and a few
#: batches more (the first ones wait for the actors).
FRAMES = (WINDOW + 10) * 16 * 20
SAYS = "seems to need memory"


#: A3C: worker 0 alone feeds the check (`gazelle.algorithms.a3c.memory`), batches of the
#: same 16 x 20 steps from its 4 envs, so the window's frames are twice as many with the
#: vector preset's 2 workers.
A3C_FRAMES = (WINDOW + 10) * 16 * 20 * 2 + 20_000


def train(env: str, logdir: Path, *flags: str, frames: int = FRAMES) -> str:
    """stdout and stderr of `gazelle train --env ENV` at its defaults (seed 1)."""
    command = [*GAZELLE, "train", "--env", env, "--seed", "1", "--logdir", str(logdir),
               "--total-frames", str(frames), *flags]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


def test_the_default_command_says_a_memory_task_needs_the_lstm(tmp_path):
    """The memoryless default does not solve the memory task (chance is 0, solved 1.0: its
    progress rows' last mean stays at or below 0.3) and says so, once, naming --use-lstm.
    The default on CartPole says nothing: tests/test_learning.py's CartPole run checks it."""
    out = train("gazelle/Memory-v0", tmp_path / "memory")
    lines = [line for line in out.splitlines() if SAYS in line]
    assert len(lines) == 1, out[-3000:]
    assert lines[0].startswith("gazelle: warning:") and "--use-lstm" in lines[0]
    rows = [json.loads(line) for line in (tmp_path / "memory" / "progress.jsonl").open()]
    returns = [row["episode_return"] for row in rows if row.get("episode_return") is not None]
    assert returns and returns[-1] <= 0.3, returns


def test_a3c_at_its_default_says_a_memory_task_needs_the_lstm(tmp_path):
    """The same with `--algo a3c` (its vector preset is memoryless too): one worker runs the
    check on its rollouts. The A3C CartPole run of tests/test_learning.py checks that a
    Markov task gets no verdict."""
    out = train("gazelle/Memory-v0", tmp_path / "a3c", "--algo", "a3c", frames=A3C_FRAMES)
    lines = [line for line in out.splitlines() if SAYS in line]
    assert len(lines) == 1, out[-3000:]
    assert lines[0].startswith("gazelle: warning:") and "--use-lstm" in lines[0]
    rows = [json.loads(line) for line in (tmp_path / "a3c" / "progress.jsonl").open()]
    assert max(row.get("memory/needed", 0.0) for row in rows) > 0
