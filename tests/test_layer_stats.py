"""Per layer group gradient RMS and update-to-weight ratio, and the stall warning."""

import pytest
import torch
from torch import nn

from gazelle.runtime.layer_stats import LayerStats, StallWatch, parameter_groups


class TwoGroups(nn.Module):
    def __init__(self):
        super().__init__()
        self.torso = nn.Linear(4, 3)
        self.policy = nn.Linear(3, 2)

    def forward(self, x):
        return self.policy(torch.relu(self.torso(x)))


def test_groups_are_the_top_level_children():
    groups = parameter_groups(TwoGroups())
    assert sorted(groups) == ["policy", "torso"] and len(groups["torso"]) == 2


def test_sgd_step_gives_the_hand_computed_rms_and_ratio():
    torch.manual_seed(0)
    model = TwoGroups()
    stats = LayerStats(model)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    grads = {
        g: torch.cat([p.grad.reshape(-1) for p in ps]) for g, ps in parameter_groups(model).items()
    }
    weights = {
        g: torch.cat([p.detach().reshape(-1) for p in ps])
        for g, ps in parameter_groups(model).items()
    }
    lr = 0.1
    stats.before_step()
    torch.optim.SGD(model.parameters(), lr=lr).step()
    metrics = stats.after_step()
    for group in ("torso", "policy"):
        rms = grads[group].pow(2).mean().sqrt()
        ratio = lr * grads[group].norm() / weights[group].norm()
        assert float(metrics[f"layers/grad_rms/{group}"]) == pytest.approx(float(rms), rel=1e-5)
        assert float(metrics[f"layers/update_ratio/{group}"]) == pytest.approx(
            float(ratio), rel=1e-4
        )


def test_stall_watch_warns_once_after_patience_and_again_after_recovery():
    lines = []
    watch = StallWatch(threshold=1e-4, patience=3, warn=lines.append)
    low, high = {"layers/update_ratio/torso": 1e-6}, {"layers/update_ratio/torso": 1e-3}
    assert [watch.update(low, i) for i in range(5)] == [False, False, True, False, False]
    assert len(lines) == 1 and "torso" in lines[0] and "not learning" in lines[0]
    assert not watch.update(high, 5)  # one update up: the median of the last 3 is still low
    assert not watch.update(low, 6)
    assert len(lines) == 1
    assert [watch.update(high, 7 + i) for i in range(2)] == [False, False]  # median: up
    # then down again: [high, high, low] is still up, [high, low, low] is down
    assert [watch.update(low, 9 + i) for i in range(2)] == [False, True]
    assert len(lines) == 2
    assert not StallWatch(warn=lines.append).update({}, 0)  # no stats: nothing to say


def test_a_torso_stalled_but_for_a_few_updates_is_warned_about():
    """The median, not "all below in a row": a saturated torso (A3C at 3x the seed's
    learning rate on Pong) had a few measured updates above the threshold among many
    below; one update in five up must not keep the warning away, as it did."""
    lines = []
    watch = StallWatch(threshold=1e-4, patience=500, warn=lines.append, every=10)
    low, high = {"layers/update_ratio/torso": 5e-5}, {"layers/update_ratio/torso": 3e-4}
    warned = [watch.update(high if i % 5 == 4 else low, 10 * i) for i in range(60)]
    assert warned == [False] * 49 + [True] + [False] * 10
    assert len(lines) == 1 and "for 500 updates (median 5.0e-05" in lines[0]
    assert "saturated" in lines[0]
    # a learning torso with a few low updates (one in five) is not warned about
    healthy = StallWatch(threshold=1e-4, patience=500, warn=lines.append, every=10)
    assert not any(healthy.update(low if i % 5 == 4 else high, 10 * i) for i in range(200))
    assert len(lines) == 1


def test_each_measured_update_stands_for_every_updates():
    """A3C's workers measure one update in ten: 50 measured stalls are 500 updates."""
    lines = []
    watch = StallWatch(threshold=1e-4, patience=500, warn=lines.append, every=10)
    low = {"layers/update_ratio/torso": 1e-6}
    assert [watch.update(low, 10 * i) for i in range(50)] == [False] * 49 + [True]
    assert len(lines) == 1 and "for 500 updates" in lines[0]


def test_the_ratio_is_judged_at_the_initial_learning_rate():
    lines = []
    watch = StallWatch(threshold=1e-4, patience=2, warn=lines.append)
    decayed = {"layers/update_ratio/torso": 5e-5}  # a healthy 5e-4 at a tenth of the rate
    assert not any(watch.update(decayed, i, lr_scale=0.1) for i in range(5))
    # the rate is ~0 at the end of a run: nothing to judge
    assert not any(
        watch.update({"layers/update_ratio/torso": 0.0}, i, lr_scale=0.01) for i in range(5)
    )
    assert [watch.update(decayed, i, lr_scale=1.0) for i in range(2)] == [False, True]
    assert len(lines) == 1


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["impala", "a3c"])
def test_a_dead_torso_is_warned_about_and_the_layer_stats_reach_progress(
    small_config, tmp_path, capsys, algo
):
    """A torso of dead units (its weights never move) on CartPole: after `patience` (500)
    updates the loop prints the stall warning; every progress row has the layer stats, and
    the units' health names every torso unit dead."""
    import json

    from gazelle.algorithms import train

    train(small_config(algo=algo, model="runtime_children:DeadTorso", total_frames=30_000,
                       log_interval_s=0.5))  # fmt: skip
    out = capsys.readouterr().out
    assert out.count("the torso's weights have moved by less than 7e-05") == 1
    assert "for 500 updates" in out and "it is not learning" in out
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "layers/update_ratio/torso" in row]
    assert len(trained) >= 2
    for row in trained:
        assert row["layers/update_ratio/torso"] == 0.0
        assert row["layers/grad_rms/torso"] == 0.0
        assert row["layers/update_ratio/policy"] > 0.0 and row["layers/grad_rms/policy"] > 0.0
        assert row["layers/dead_units/torso"] == 1.0  # every unit of it, on every update
