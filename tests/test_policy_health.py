"""A policy that went deterministic before it learned is warned about (`DeadPolicyWatch`):
on the kept runs of A3C's dead CartPole policy and not on any kept CartPole run that learned,
and in a real run of each loop."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from gazelle.actions import ActionComponent, ActionSpec
from gazelle.runtime import policy_health
from gazelle.runtime.policy_health import DeadPolicyWatch, max_entropy

KEPT = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "lstm-lr"


def test_the_largest_entropy_sums_the_discrete_components_and_a_gaussian_has_none():
    assert max_entropy(ActionSpec.categorical(6)) == pytest.approx(math.log(6))
    spec = ActionSpec((ActionComponent("categorical", 3), ActionComponent("bernoulli", 4)))
    assert max_entropy(spec) == pytest.approx(math.log(3) + 4 * math.log(2))
    box = ActionSpec((ActionComponent("gaussian", 2, low=(-1.0, -1.0), high=(1.0, 1.0)),))
    assert max_entropy(box) is None
    lines: list[str] = []
    watch = DeadPolicyWatch(None, warn=lines.append)
    assert not any(watch.update(f, 0.0, 0.0) for f in range(0, 10**6, 1000)) and not lines


def test_a_deterministic_policy_is_warned_about_only_while_no_better_than_at_its_start():
    lines: list[str] = []
    watch = DeadPolicyWatch(math.log(2), patience_frames=30, warn=lines.append)
    watch.update(0, 0.69, 20.0)  # the first return: 20
    assert [watch.update(f, 1e-4, 9.4) for f in (10, 20, 30, 40, 50)] == [
        False, False, False, True, False,
    ]  # fmt: skip
    assert "deterministic for 30 frames" in lines[0] and "9.4 (first measured: 20)" in lines[0]
    watch.update(60, 0.5, 30.0)  # recovered: armed again
    assert [watch.update(f, 1e-3, 25.0) for f in (70, 200)] == [False, False]  # better: no
    assert watch.no_better_than() == pytest.approx(22.001)  # the start's, and a tenth
    assert [watch.update(f, 1e-3, 19.0) for f in (210, 220, 240)] == [False, False, True]
    assert len(lines) == 2


def _replay(path: Path) -> list[str]:
    with gzip.open(path / "progress.jsonl.gz") as lines_in:
        rows = [json.loads(line) for line in lines_in]
    lines: list[str] = []
    watch = DeadPolicyWatch(math.log(2), warn=lines.append)
    for row in rows:
        watch.update(row["frames"], row.get("policy/entropy"), row.get("episode_return"))
    return lines


CARTPOLE_RUNS = sorted(
    str(p.relative_to(KEPT))
    for p in KEPT.glob("*/seed-*")
    if "CartPole" in (p / "launch.json").read_text()
)


@pytest.mark.parametrize("run", CARTPOLE_RUNS)
def test_the_kept_cartpole_runs_warn_exactly_where_the_policy_died(run):
    """A3C at one rate (`a3c-share1`): entropy 1e-4 and 9.4-step episodes from ~90K frames,
    one seed for good; every other kept CartPole run learned (IMPALA at one rate fell
    and rose again with entropy >= 0.012 of ln 2)."""
    lines = _replay(KEPT / run)
    assert len(lines) == (1 if run.startswith("a3c-share1/") else 0), lines


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["impala", "a3c"])
def test_a_policy_deterministic_from_the_start_is_warned_about_in_a_run(
    small_config, capsys, monkeypatch, algo
):
    """A torso whose features are 10,000x a fresh one's, no LSTM: the logits are huge, the
    policy pushes one way only and CartPole's episodes last ~9 steps. The loop warns."""
    from gazelle.algorithms import train

    monkeypatch.setattr(policy_health, "PATIENCE_FRAMES", 1_500)
    train(small_config(algo=algo, model="runtime_children:LoudTorso", use_lstm=False,
                       total_frames=4_000, log_interval_s=0.3))  # fmt: skip
    out = capsys.readouterr().out
    assert out.count("the policy has been deterministic for") == 1, out[-2000:]
