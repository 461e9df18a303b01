"""IMPALA end to end on the local backend: real actor processes, shared memory, checkpoints."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys

import pytest
import torch

from gazelle import checkpoint
from gazelle.algorithms.impala import train
from gazelle.config import Config
from gazelle.evaluation import evaluate

pytestmark = pytest.mark.slow

SMALL = dict(
    env="CartPole-v1",
    num_actors=2,
    envs_per_actor=2,
    batch_size=4,
    unroll_length=10,
    log_interval_s=0.5,
    checkpoint_interval_s=1000.0,
)


def test_run_logs_checkpoints_and_resumes_exactly(tmp_path):
    config = Config.of(**SMALL, total_frames=2000, logdir=str(tmp_path))
    first = train(config)
    assert first.frames >= 2000 and first.episodes > 0
    state = checkpoint.load(tmp_path / "checkpoint.pt")
    assert state["frames"] == first.frames and state["updates"] == first.updates
    assert state["optimizer"]["state"], "optimiser state must be saved"
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert rows[-1]["frames"] == first.frames and "losses/total" in rows[-1]
    timed = [r for r in rows if "timing/actor_env_per_step" in r]
    assert timed and all(r["timing/actor_env_per_step"] > 0 for r in timed)
    assert all(r["timing/actor_inference_per_step"] > 0 for r in timed)
    assert any("charts/policy_lag" in r for r in rows)
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path))

    # Resume: same logdir, larger budget: frames and updates continue, the optimiser state
    # is the saved one (the LR schedule is a function of frames, so it continues too).
    second = train(Config.of(**SMALL, total_frames=4000, logdir=str(tmp_path)))
    assert second.frames >= 4000
    assert second.updates == first.updates + (second.frames - first.frames) // 40
    resumed = checkpoint.load(tmp_path / "checkpoint.pt")
    assert resumed["updates"] == second.updates


def test_a_resume_with_another_budget_keeps_the_learning_rate_continuous(tmp_path, capsys):
    """A run stopped early (its target reached at F frames of 20,000) and resumed with a
    6,000 budget goes on from the rate it had at F down to 0 at 6,000, not from the 6,000
    budget's own line (a step down from 0.87x to 0.6x of the rate at F ~ 2,400)."""
    from gazelle.runtime.schedule import LinearDecay

    first = train(Config.of(**SMALL, total_frames=20_000, target_return=5.0, logdir=str(tmp_path)))
    stopped = first.frames
    assert stopped < 10_000, "the target (a full window of episodes) should stop it early"
    lr = json.loads((tmp_path / "config.json").read_text())["impala"]["learning_rate"]
    saved = checkpoint.load(tmp_path / "checkpoint.pt")["lr_schedule"]
    assert saved == LinearDecay.fresh(lr, 20_000).to_dict()
    capsys.readouterr()
    train(Config.of(**SMALL, total_frames=6000, logdir=str(tmp_path)))
    assert "the learning rate goes on from" in capsys.readouterr().out
    schedule = LinearDecay.from_dict(checkpoint.load(tmp_path / "checkpoint.pt")["lr_schedule"])
    at_stop = lr * (1 - stopped / 20_000)
    assert schedule == LinearDecay(at_stop, stopped, 6000, lr)
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    after = [r for r in rows if r["frames"] > stopped and "charts/learning_rate" in r]
    assert after, "the resumed run logs its learning rate"
    # why: a row's rate was set before the batch it logs, so it lies between the schedule at
    # the row's frames and the rate at the resume.
    for row in after:
        assert schedule(row["frames"]) - 1e-12 <= row["charts/learning_rate"] <= at_stop + 1e-12
    assert after[0]["charts/learning_rate"] > lr * (1 - stopped / 6000) * 1.1


def test_resume_restores_optimizer_and_weights(tmp_path, monkeypatch):
    config = Config.of(**SMALL, total_frames=800, logdir=str(tmp_path))
    train(config)
    saved = checkpoint.load(tmp_path / "checkpoint.pt")
    seen = {}
    import gazelle.algorithms.impala.loop as loop

    original = loop.restore

    def spy(path, config, agent, optimizer, device):
        out = original(path, config, agent, optimizer, device)
        seen["weights"] = {k: v.clone() for k, v in agent.state_dict().items()}
        seen["opt"] = optimizer.state_dict()
        return out

    monkeypatch.setattr(loop, "restore", spy)
    train(Config.of(**SMALL, total_frames=800, logdir=str(tmp_path)))  # nothing to do
    for key, value in saved["agent"].items():
        assert torch.equal(seen["weights"][key], value)
    first_param = next(iter(saved["optimizer"]["state"]))
    assert torch.equal(
        seen["opt"]["state"][first_param]["ms"], saved["optimizer"]["state"][first_param]["ms"]
    )


def test_resume_continues_the_recent_return_window(tmp_path):
    # why: an empty window after a resume shows the first episodes to end, the shortest
    # (on Pong the lost ones: a dip to -20 in the curve at every resume).
    train(Config.of(**SMALL, total_frames=3000, logdir=str(tmp_path)))
    saved = checkpoint.load(tmp_path / "checkpoint.pt")["returns"]
    window = saved[""]
    assert window and saved["CartPole-v1"] == window
    train(Config.of(**SMALL, total_frames=3000, logdir=str(tmp_path)))  # nothing to do
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert rows[-1]["episode_return"] == pytest.approx(sum(window) / len(window))
    assert checkpoint.load(tmp_path / "checkpoint.pt")["returns"][""] == window


def test_resume_with_another_env_is_a_clear_error(tmp_path):
    train(Config.of(**SMALL, total_frames=400, logdir=str(tmp_path)))
    with pytest.raises(ValueError, match="--env"):
        train(
            Config.of(
                **{**SMALL, "env": "gazelle/Memory-v0"}, total_frames=400, logdir=str(tmp_path)
            )
        )


@pytest.mark.parametrize("inference", ["local", "central"])
def test_actor_killed_with_sigkill_is_restarted_and_training_goes_on(tmp_path, inference):
    killed = []

    def kill_one(progress):
        if not killed:
            actors = [
                p for p in multiprocessing.active_children() if p.name.startswith("gazelle-actor-")
            ]
            os.kill(actors[0].pid, signal.SIGKILL)
            killed.append(actors[0].pid)

    config = Config.of(**SMALL, total_frames=6000, logdir=str(tmp_path), inference=inference)
    result = train(config, on_progress=kill_one)
    assert killed, "the run ended before an actor could be killed"
    assert result.actor_restarts >= 1
    assert result.frames >= 6000


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_save_a_checkpoint(tmp_path, sig):
    """SIGINT is sent to a run started with SIGINT ignored, as `nohup cmd &` starts it."""
    script = (
        "from gazelle.algorithms.impala import train\n"
        "from gazelle.config import Config\n"
        f"train(Config.of(env='CartPole-v1', num_actors=1, envs_per_actor=2, batch_size=2,"
        f" unroll_length=10, total_frames=10**9, logdir={str(tmp_path)!r},"
        " log_interval_s=0.2))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    progress = tmp_path / "progress.jsonl"
    deadline = 120
    import time

    start = time.monotonic()
    while not (progress.exists() and progress.read_text().count("\n") >= 2):
        assert time.monotonic() - start < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert "interrupted" in out
    state = checkpoint.load(tmp_path / "checkpoint.pt")
    assert state["frames"] > 0


def test_test_mode_acts_with_the_checkpoints_weights_and_writes_results(tmp_path):
    train(Config.of(**SMALL, total_frames=400, logdir=str(tmp_path)))
    # why: make the checkpoint's policy push left whatever it sees. CartPole then falls within
    # 8-11 steps every episode, which an agent with any other weights (a fresh one is near
    # uniform: ~20 steps on average) does not do 10 times in a row.
    state = checkpoint.load(tmp_path / "checkpoint.pt")
    state["agent"]["policy.weight"].zero_()
    state["agent"]["policy.bias"].copy_(torch.tensor([20.0, -20.0]))
    checkpoint.save(tmp_path / "checkpoint.pt", state)
    results = evaluate(tmp_path, episodes=10, verbose=False)
    returns = results["levels"]["CartPole-v1"]["returns"]
    assert len(returns) == 10 and all(8 <= r <= 11 for r in returns), returns
    on_disk = json.loads((tmp_path / "test_results.json").read_text())
    assert on_disk["levels"]["CartPole-v1"]["mean_return"] == pytest.approx(
        results["levels"]["CartPole-v1"]["mean_return"]
    )
