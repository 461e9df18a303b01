"""The units' health: dead ReLU units and saturated LSTM gates, against slow references, on
a real agent, through the learner and an A3C update."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.models import Agent
from gazelle.runtime.learner import HEALTH_EVERY, Learner
from gazelle.runtime.unit_health import (
    ELU_FLOOR,
    SATURATED_SHARE,
    SaturationWatch,
    UnitHealth,
    dead_floor,
    dead_share,
    saturated_gates,
)
from gazelle.types import ObsSpec

SPEC = ObsSpec((4, 36, 36), np.dtype(np.uint8), num_actions=3)


def reference_dead_share(x: torch.Tensor) -> float:
    """Unit by unit: a unit (dim 1) is dead if it is 0 at every sample and position."""
    dead = 0
    for unit in range(x.shape[1]):
        values = x[:, unit].reshape(-1).tolist()
        dead += all(v <= 0 for v in values)
    return dead / x.shape[1]


def reference_saturated(lstm: nn.LSTM, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor):
    """Step by step, the LSTM cell's equations; counts the gate units past the 7% points."""
    w_ih, w_hh, b_ih, b_hh = (t.detach() for t in lstm.all_weights[0])
    h, c = h0[0], c0[0]
    saturated = count = 0
    for t in range(x.shape[0]):
        for b in range(x.shape[1]):
            z = w_ih @ x[t, b] + b_ih + w_hh @ h[b] + b_hh
            size = z.shape[0] // 4
            for k, value in enumerate(z.tolist()):
                tanh_gate = 2 * size <= k < 3 * size  # order i, f, g, o
                saturated += abs(value) > (2.0 if tanh_gate else 4.0)
                count += 1
        z = x[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = z.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return saturated, count


def test_dead_share_matches_the_reference_for_maps_and_vectors():
    gen = torch.Generator().manual_seed(0)
    maps = torch.relu(torch.randn(5, 8, 3, 3, generator=gen))
    maps[:, [1, 4, 6]] = 0.0  # three dead channels
    maps[2, 0] = 0.0  # one sample's zeros do not kill a channel
    assert float(dead_share(maps)) == reference_dead_share(maps) == 3 / 8
    vectors = torch.relu(torch.randn(7, 10, generator=gen) - 1.0)
    assert float(dead_share(vectors)) == pytest.approx(reference_dead_share(vectors))


def test_an_elu_torso_counts_the_units_whose_input_stays_below_minus_3():
    """ELU: a channel is counted when its input is below -3 at every sample and position
    (slope under 5%), by the reference on the inputs; the ReLU count is untouched."""
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="shallow", use_lstm=False, activation="elu")
    elus = [m for m in agent.torso.modules() if isinstance(m, nn.ELU)]
    inputs: list[torch.Tensor] = []
    for elu in elus:
        elu.register_forward_hook(lambda _m, i, _out: inputs.append(i[0].detach()))
    with torch.no_grad():
        conv = agent.torso.convs[0]
        conv.weight[:9] = 0.0
        conv.bias[:5] = -3.5  # counted
        conv.bias[5:9] = -2.5  # below 0 everywhere, but above -3: not counted
    health = UnitHealth(agent)
    with health.recording():
        agent.unroll(*frames_and_state(agent))
    first = reference_dead_share(inputs[0] + 3.0)  # input <= -3 everywhere
    assert first == pytest.approx(5 / 16)
    worst = max(reference_dead_share(x + 3.0) for x in inputs)
    assert float(health.metrics()["layers/dead_units/torso"]) == pytest.approx(worst)


@pytest.mark.parametrize("scale", [0.3, 3.0])
def test_saturated_gates_match_the_step_by_step_reference(scale):
    torch.manual_seed(1)
    lstm = nn.LSTM(6, 5)
    with torch.no_grad():
        for p in lstm.parameters():
            p.mul_(scale)  # 3x: many gates past the points; 0.3x: few
    x = torch.randn(4, 3, 6) * 2
    h0, c0 = torch.randn(1, 3, 5), torch.randn(1, 3, 5)
    out, _ = lstm(x, (h0, c0))
    saturated, count = saturated_gates(lstm, x, h0, out)
    assert (int(saturated), count) == reference_saturated(lstm, x, h0, c0)


def frames_and_state(agent: Agent, steps: int = 5, batch: int = 2):
    gen = torch.Generator().manual_seed(2)
    frames = torch.randint(0, 256, (steps, batch, *SPEC.frame_shape), generator=gen)
    return (
        {"frame": frames.to(torch.uint8)},
        torch.zeros(steps, batch, dtype=torch.long),
        torch.zeros(steps, batch),
        torch.zeros(steps, batch, dtype=torch.bool),
        agent.initial_state(batch),
    )


def test_a_torso_with_dead_first_layer_channels_reports_its_worst_layer():
    """12 of the first conv layer's 16 channels pushed far below zero: the torso's share is
    its worst layer's (at least that layer's 0.75), not the 4% those channels are of all its
    304 units."""
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="shallow", use_lstm=False)
    relus = [m for m in agent.torso.modules() if isinstance(m, nn.ReLU)]
    assert len(relus) == 3  # both convs' and the linear layer's
    outputs: list[torch.Tensor] = []
    for relu in relus:
        relu.register_forward_hook(lambda _m, _i, out: outputs.append(out.detach()))
    health = UnitHealth(agent)
    with health.recording():
        agent.unroll(*frames_and_state(agent))
    assert health.metrics()["layers/dead_units/torso"] < 0.25  # fresh weights
    with torch.no_grad():
        agent.torso.convs[0].bias[:12] = -1e3
    outputs.clear()
    with health.recording():
        agent.unroll(*frames_and_state(agent))
    shares = [reference_dead_share(out) for out in outputs]
    assert shares[0] >= 0.75  # the 12 (and any channel these frames never lit)
    assert float(health.metrics()["layers/dead_units/torso"]) == pytest.approx(max(shares))


def test_a_saturated_core_is_reported_and_a_fresh_one_is_not():
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="universe", use_lstm=True)
    health = UnitHealth(agent)
    with health.recording():
        agent.unroll(*frames_and_state(agent))
    assert float(health.metrics()["layers/saturated_gates/core"]) < 0.05
    with torch.no_grad():
        agent.core.lstm.weight_ih_l0.mul_(200.0)  # inputs of ~0.1 then give |z| of ~10s
    with health.recording():
        agent.unroll(*frames_and_state(agent))
    assert float(health.metrics()["layers/saturated_gates/core"]) > 0.5


def test_passes_outside_recording_are_not_measured_and_metrics_clear():
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="shallow", use_lstm=True)
    health = UnitHealth(agent)
    agent.unroll(*frames_and_state(agent))  # acting: not recorded
    with health.recording(on=False):
        agent.unroll(*frames_and_state(agent))
    assert health.metrics() == {}
    with health.recording():
        agent.unroll(*frames_and_state(agent))
    assert set(health.metrics()) == {"layers/dead_units/torso", "layers/saturated_gates/core"}
    assert health.metrics() == {}  # read once
    # no hook outlives a recording: copies (the inference server's) and pickles carry none
    assert not any(m._forward_hooks for m in agent.modules())
    pickle.loads(pickle.dumps(agent)).unroll(*frames_and_state(agent))
    assert health.metrics() == {}


def learner_batch(agent: Agent, steps: int = 4, batch: int = 2):
    obs, action, reward, done, state = frames_and_state(agent, steps + 1, batch)
    out = {
        **obs,
        "action": action,
        "reward": reward,
        "terminated": done,
        "truncated": done.clone(),
        "truncation_value": torch.zeros(steps + 1, batch),
        "policy_logits": torch.zeros(steps + 1, batch, SPEC.num_actions),
        "baseline": torch.zeros(steps + 1, batch),
    }
    out["state_h"], out["state_c"] = state
    return out


def test_the_learner_measures_one_update_in_health_every_and_reports_it_until_the_next():
    torch.manual_seed(0)
    agent = Agent(SPEC, torso="shallow", use_lstm=True)
    settings = LossSettings(0.99, 0.5, 0.01, "abs_one")
    learner = Learner(
        agent,
        torch.optim.SGD(agent.parameters(), lr=0.0),
        functools.partial(impala_loss, settings=settings),
        torch.device("cpu"),
    )
    first = learner.step(learner_batch(agent), learning_rate=0.0)
    assert float(first["layers/dead_units/torso"]) < 0.25
    assert "layers/saturated_gates/core" in first
    with torch.no_grad():
        agent.torso.convs[0].bias[:8] = -1e3
    for _ in range(HEALTH_EVERY - 1):  # not measured: the first update's values stay
        metrics = learner.step(learner_batch(agent), learning_rate=0.0)
        assert float(metrics["layers/dead_units/torso"]) == float(first["layers/dead_units/torso"])
    measured = learner.step(learner_batch(agent), learning_rate=0.0)
    assert float(measured["layers/dead_units/torso"]) >= 0.5  # the first layer's 8 of 16


def test_an_a3c_update_reports_the_health_only_when_measured():
    from gazelle.algorithms.a3c.loss import A3CLossSettings
    from gazelle.algorithms.a3c.shared_adam import SharedAdamServer
    from gazelle.algorithms.a3c.worker import TrainerSettings, train_step

    torch.manual_seed(0)
    agent, local = Agent(SPEC, "universe", True), Agent(SPEC, "universe", True)
    server = SharedAdamServer(agent, 1, lr=1e-4, eps=1e-8)
    loss = A3CLossSettings(0.99, 1.0, 0.01, 0.5, "none")
    settings = TrainerSettings(loss, grad_norm_clip=40.0, queue_size=1, action_repeats=4)
    rollout = learner_batch(local)
    rollout["bootstrap"] = torch.zeros(2)
    health = UnitHealth(local)
    measured = train_step(local, server, rollout, settings, 0, True, health)
    assert 0.0 <= measured["layers/saturated_gates/core"] < 0.05
    unmeasured = train_step(local, server, rollout, settings, 0, False, health)
    assert not any(k.startswith("layers/") for k in unmeasured)


@pytest.mark.slow
def test_the_benchmark_reads_the_checkpoint_layer_by_layer(small_config, tmp_path):
    """benchmarks/unit_health.py on a short Catch run whose checkpoint then gets 12 of its
    first conv layer's 16 channels killed: the trained network shows them, the fresh one
    (same frames) does not, and every ReLU and the LSTM are named."""
    import importlib.util
    from pathlib import Path

    from gazelle import checkpoint
    from gazelle.algorithms import train

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "unit_health.py"
    module_spec = importlib.util.spec_from_file_location("unit_health_benchmark", path)
    assert module_spec is not None and module_spec.loader is not None
    bench = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(bench)

    train(small_config(env="gazelle/Catch-v0", model="shallow", use_lstm=True,
                       total_frames=1_000))  # fmt: skip
    state = checkpoint.load(tmp_path / "checkpoint.pt")
    state["agent"]["torso.convs.0.bias"][:12] = -1e3
    checkpoint.save(tmp_path / "killed.pt", state, keep_previous=False)
    report = bench.measure(tmp_path, steps=30, seed=1, path=tmp_path / "killed.pt")

    trained, fresh = report["trained"], report["fresh"]
    assert report["frames_trained"] >= 1_000
    assert set(trained["dead_units"]) == {"torso.convs.1", "torso.convs.3", "torso.relu"}
    assert trained["dead_units"]["torso.convs.1"] >= 0.75 > fresh["dead_units"]["torso.convs.1"]
    assert set(trained["saturated_gates"]) == {"core.lstm"}
    assert 0.0 <= fresh["saturated_gates"]["core.lstm"] < 0.05
    assert set(trained["grad_norm"]) == {"torso", "core", "policy", "baseline"}
    assert fresh["entropy"] == pytest.approx(np.log(3), abs=0.05)  # Catch: 3 actions


def test_dead_floor_is_the_one_rule_for_relu_and_elu_units():
    """The training loops' hooks and benchmarks/unit_health.py read units by this rule."""
    assert dead_floor(torch.nn.ReLU()) == 0.0
    assert dead_floor(torch.nn.ELU()) == ELU_FLOOR
    assert dead_floor(torch.nn.ELU(alpha=0.5)) is None  # its floor would differ
    assert dead_floor(torch.nn.Tanh()) is None


def test_the_saturation_watch_warns_once_at_a_saturated_median_and_again_after_recovery():
    lines: list[str] = []
    watch = SaturationWatch(warn=lines.append, patience=50, every=10)  # 5 measured updates
    key = "layers/saturated_gates/core"
    # why: shares as the measured runs logged them: a learning A3C CartPole LSTM at 0.84-0.88,
    # then Pong's deep torso + LSTM at 0.98.
    assert not any(watch.update({key: share}, i) for i, share in enumerate([0.84, 0.88] * 10))
    assert not any(watch.update({"losses/total": 1.0}, i) for i in range(20))  # not measured
    fed = [watch.update({key: 0.98}, 100 + i) for i in range(8)]
    assert fed == [False, False, True, False, False, False, False, False]  # median crosses
    assert len(lines) == 1 and "0.98 of the LSTM's gate units" in lines[0]
    assert "over the last 50 updates" in lines[0] and "--core-input-norm" in lines[0]
    for i in range(5):
        watch.update({key: 0.1}, 200 + i)  # recovered
    assert [watch.update({key: SATURATED_SHARE}, 300 + i) for i in range(3)] == [
        False,
        False,
        True,
    ]
    assert len(lines) == 2


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "norm"), [("impala", False), ("impala", True), ("a3c", False)])
def test_a_saturated_lstm_is_warned_about_unless_its_input_is_normed(
    small_config, capsys, algo, norm
):
    """An LSTM after a torso whose output is 10,000x a fresh one's (Pong's deep torso grew
    600-3,400x): the run warns that the gates are saturated; with --core-input-norm it does
    not, and its gates are not saturated."""
    import json

    from gazelle.algorithms import train

    config = small_config(algo=algo, model="runtime_children:LoudTorso", use_lstm=True,
                          core_input_norm=norm, total_frames=5_000, log_interval_s=0.5)  # fmt: skip
    train(config)
    out = capsys.readouterr().out
    assert out.count("of the LSTM's gate units have been saturated") == (0 if norm else 1)
    rows = (config.run.folder() / "progress.jsonl").read_text().splitlines()
    shares = [json.loads(r)[KEY] for r in rows if KEY in json.loads(r)]
    assert shares and (max(shares) < 0.5 if norm else min(shares) > SATURATED_SHARE)


KEY = "layers/saturated_gates/core"
