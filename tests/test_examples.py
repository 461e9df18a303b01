"""The scripts in examples/ run as a user runs them (their own process, actors spawned from
it, registrations made under their main guard) and train: frames reached, a checkpoint,
episodes logged, test mode run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gazelle.config import Config
from gazelle.models import build_agent
from gazelle.types import ObsSpec

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FRAMES = 3000


def run_example(name: str, logdir: Path) -> str:
    """Run `examples/<name>` for `FRAMES` frames into `logdir`; its output."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--frames", str(FRAMES), "--logdir", str(logdir)],
        cwd=logdir.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def check_trained(logdir: Path, level: str) -> tuple[dict, list[float]]:
    """The run reached its frames, wrote a checkpoint, logged episodes and ran test mode;
    returns the checkpoint and the logged episode returns."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    state = torch.load(logdir / "checkpoint.pt", weights_only=False)
    assert state["frames"] >= FRAMES and state["updates"] > 0
    rows = [json.loads(line) for line in (logdir / "progress.jsonl").read_text().splitlines()]
    assert rows[-1]["frames"] == state["frames"]
    assert any(row["episode_return"] is not None for row in rows)
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    returns = [e.value for e in events.Scalars(f"{level}/episode_return")]
    assert len(returns) == state["episodes"] > 0
    tested = json.loads((logdir / "test_results.json").read_text())
    assert len(tested["levels"][level]["returns"]) > 0
    return state, returns


def initial_weights(logdir: Path, spec: ObsSpec) -> dict[str, torch.Tensor]:
    """The learner's weights before its first update: the builder seeds torch with the
    run's seed, then builds the agent (a seeded run starts from the same weights)."""
    config = Config.from_dict(json.loads((logdir / "config.json").read_text()))
    torch.manual_seed(config.run.seed)
    model = config.model
    return build_agent(spec, model.torso, bool(model.use_lstm), model.init).state_dict()


def test_custom_env_example_trains_on_its_observations(tmp_path):
    logdir = tmp_path / "signpost"
    out = run_example("custom_env.py", logdir)
    assert "test mode: mean return" in out
    state, returns = check_trained(logdir, "Signpost-v0")
    # Signpost's episodes end at +1 or -1, or are cut at 20 steps with 0: these are its.
    assert set(returns) <= {-1.0, 0.0, 1.0}
    # Its observations reached the agent. The frame is the one-hot cell of a corridor of 5;
    # episodes end on reaching cell 0 or 4 (the env resets there), so the agent only ever
    # sees cells 1-3: the torso's first-layer weights for those moved from their initial
    # values, and the ones for cells 0 and 4 never got a gradient.
    spec = ObsSpec((5,), np.dtype(np.float32), num_actions=2, has_instruction=True)
    initial, trained = initial_weights(logdir, spec), state["agent"]
    assert initial.keys() == trained.keys()
    first = "torso.layers.0.weight"
    unchanged = [bool(torch.equal(initial[first][:, j], trained[first][:, j])) for j in range(5)]
    assert unchanged == [True, False, False, False, True]
    # The instruction ("go left" / "go right") reached the language encoder, which learned.
    instruction = [k for k in trained if k.startswith("instruction.")]
    assert instruction and all(not torch.equal(initial[k], trained[k]) for k in instruction)


def test_custom_torso_example_trains_with_its_torso(tmp_path):
    logdir = tmp_path / "resmlp"
    out = run_example("custom_torso.py", logdir)
    assert "test mode: mean return" in out
    state, returns = check_trained(logdir, "CartPole-v1")
    assert min(returns) >= 1.0  # CartPole: +1 per step survived
    saved = json.loads((logdir / "config.json").read_text())
    assert saved["model"]["torso"] == "resmlp"
    # The learner's agent holds the example's network: its layers, its sizes.
    torso = {k: v.shape for k, v in state["agent"].items() if k.startswith("torso.")}
    assert torso["torso.net.inp.weight"] == (64, 4)
    assert {"torso.net.blocks.0.0.weight", "torso.net.blocks.1.1.weight"} <= torso.keys()
    # why: CartPole's preset has no LSTM, so the heads read the torso's 64 features, plus
    # the last reward and the one-hot last action
    assert not any(k.startswith("core.") for k in state["agent"])
    assert state["agent"]["policy.weight"].shape[1] == 64 + 1 + 2
