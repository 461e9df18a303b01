"""The layout gazelle chooses when `--num-actors` is left unset (gazelle.algorithms.layout)."""

from __future__ import annotations

import re

import pytest
import torch

from gazelle.algorithms.common import prepare
from gazelle.algorithms.layout import SLACK, StepCosts, actors_for, choose_num_actors
from gazelle.config import default_num_actors, default_slots_per_env

# Core-milliseconds per agent step measured on this project's 2-core machine (Pong, the
# gazelle preset: B=8, no LSTM, 32 envs per actor; `gazelle: layout:` lines).
SHALLOW = StepCosts(0.495e-3, 0.119e-3, 0.391e-3)
NATURE = StepCosts(0.474e-3, 0.281e-3, 1.003e-3)
DEEP = StepCosts(0.471e-3, 1.507e-3, 5.763e-3)


def test_two_cores_match_the_scaling_tables_best_rows():
    # docs/performance.md: 2 actors for shallow (acting is most of the work), 1 for
    # nature and deep (the learner is).
    assert actors_for(SHALLOW, cores=2) == 2
    assert actors_for(NATURE, cores=2) == 1
    assert actors_for(DEEP, cores=2) == 1


def test_actors_get_their_share_of_a_bigger_machine():
    assert SHALLOW.acting_share == pytest.approx(0.611, abs=1e-3)
    assert actors_for(SHALLOW, cores=16) == 10  # ceil(16 * 0.611 - 0.05)
    assert actors_for(DEEP, cores=16) == 5  # ceil(16 * 0.256 - 0.05)
    assert actors_for(StepCosts(1.0, 0.0, 0.0), cores=8) == 8  # never more than the cores


def test_a_share_just_over_a_whole_core_does_not_add_an_actor():
    # 2 cores x 0.52 = 1.04 cores of acting: a second actor would idle most of its time.
    assert actors_for(StepCosts(0.52, 0.0, 0.48), cores=2) == 1
    assert actors_for(StepCosts(0.56, 0.0, 0.44), cores=2) == 2  # 1.12 cores: past the slack


def test_every_level_gets_an_actor():
    assert actors_for(DEEP, cores=2, num_levels=3) == 3


def test_without_a_cpu_learner_the_rule_is_not_measured(small_config):
    config, found, _ = prepare(small_config(num_actors=2))
    cuda = torch.device("cuda")
    n, line = choose_num_actors(config.replace(num_actors=None), found, cuda, cores=8)
    assert n == default_num_actors(1, 8) == 7 and "every core but the learner's" in line
    a3c = config.replace(num_actors=None, algo="a3c")
    n, line = choose_num_actors(a3c, found, torch.device("cpu"), cores=8)
    assert n == 7 and "cores - 1, at least 2" in line


def test_an_unset_layout_is_measured_and_reported(small_config, capsys):
    config, _, _ = prepare(small_config(num_actors=None))
    line = next(x for x in capsys.readouterr().out.splitlines() if "gazelle: layout:" in x)
    match = re.search(r"layout: (\d+) actors? x 2 envs on (\d+) cores: .* acting (\d+)%", line)
    assert match, line
    n, cores, share = (int(g) for g in match.groups())
    assert config.actors.num_actors == n and 1 <= n <= cores
    # the printed share is rounded to a percent: n follows from it but at a rounding edge
    assert abs(n - (cores * share / 100 - SLACK)) < 1 + cores * 0.005


def test_the_layout_keeps_each_parts_best_interleaved_round(small_config, monkeypatch):
    """A slow spell at start-up (another run starting, the VM's host) only slows a part: the
    layout takes each part's fastest round, measured in turn, so one spell cannot swing it."""
    import gazelle.algorithms.layout as layout
    import gazelle.runtime.part_costs as part_costs

    config, found, device = prepare(small_config(num_actors=2))
    calls: list[str] = []

    def fake(name: str, rates: list[float]):
        it = iter(rates)

        def measure(*args):
            calls.append(name)
            assert args[-1] == pytest.approx(layout.MEASURE_S / layout.ROUNDS)
            return next(it)

        return measure

    # the learner's second round is slowed 2x: a single round could have been that one
    monkeypatch.setattr(part_costs, "env_rate", fake("env", [2000.0, 2500.0, 2400.0]))
    monkeypatch.setattr(part_costs, "inference_rate", fake("inference", [9000.0, 10000.0, 8000.0]))
    monkeypatch.setattr(part_costs, "learner_rate", fake("learner", [2900.0, 1500.0, 3000.0]))
    costs = layout.measure_costs(config, found, device)
    assert layout.ROUNDS == 3 and calls == ["env", "inference", "learner"] * 3
    assert (costs.env_s, costs.inference_s, costs.learner_s) == pytest.approx(
        (1 / 2500, 1 / 10000, 1 / 3000)
    )


def test_unset_slots_are_reported(small_config, capsys):
    prepare(small_config(num_actors=2, envs_per_actor=8, batch_size=8))
    out = capsys.readouterr().out
    assert "gazelle: 1 unroll slot per env: 16 envs for batches of 8" in out
    prepare(small_config(num_actors=2, envs_per_actor=8, batch_size=8, slots_per_env=2))
    assert "unroll slot" not in capsys.readouterr().out  # chosen by the user: nothing to say


def test_bf16_on_a_cpu_without_bf16_hardware_warns(small_config, capsys):
    from gazelle.runtime.learner import cpu_has_native_bf16

    prepare(small_config(precision="bf16", device="cpu"))
    warned = "without bf16 hardware" in capsys.readouterr().out
    assert warned == (not cpu_has_native_bf16())


def test_unset_slots_are_one_only_where_the_actors_hold_a_batch_and_one_more_unroll():
    assert default_slots_per_env(1, 32, 8) == 2  # a lone actor needs a second unroll
    assert default_slots_per_env(2, 32, 8) == default_slots_per_env(8, 32, 32) == 1
    assert default_slots_per_env(2, 32, 32) == 1  # 64 envs: a batch of 32 and one unroll
    assert default_slots_per_env(2, 8, 16) == default_slots_per_env(3, 8, 17) == 2
    assert default_slots_per_env(2, 32, 8, "ray") == default_slots_per_env(1, 32, 8, "ray") == 2


@pytest.mark.parametrize(("actors", "slots", "resolved"), [(1, None, 2), (2, None, 1), (2, 3, 3)])
def test_prepare_fills_unset_slots_from_the_layout(small_config, actors, slots, resolved):
    config, _, _ = prepare(
        small_config(num_actors=actors, envs_per_actor=8, batch_size=8, slots_per_env=slots)
    )
    assert config.actors.slots_per_env == resolved


#: CartPole's costs on this machine (`gazelle: layout:` line, mlp torso, 8 envs per actor).
CARTPOLE = StepCosts(0.008e-3, 0.019e-3, 0.008e-3)


def test_a_count_that_halving_a_cost_cannot_change_is_settled():
    """One round is enough where acting's or the learner's cost halved (a later round can
    only lower one, and a slowed round ran at half speed) gives the same count: CartPole
    (acting 77%) and deep (26%) on 2 cores; shallow (61%) and nature (43%) are near the
    2-core threshold of 52.5% and measured in full."""
    from gazelle.algorithms.layout import SETTLED_MARGIN, settled

    assert SETTLED_MARGIN == 2.0
    assert settled(CARTPOLE, cores=2) and settled(DEEP, cores=2)
    assert not settled(SHALLOW, cores=2) and not settled(NATURE, cores=2)
    assert not settled(CARTPOLE, cores=16)  # 12 actors at 77%; 11 or 14 within a factor 2
    assert settled(SHALLOW, cores=2, num_levels=2)  # one actor per level whatever the costs


def test_the_layout_stops_after_one_round_when_its_costs_settle_the_count(
    small_config, monkeypatch
):
    """CartPole-like costs decide 2 cores' count in the first round: one round of each part
    (the rounds' seconds as ever), and the count is the full measurement's; costs near the
    threshold go on to all three rounds."""
    import gazelle.algorithms.layout as layout
    import gazelle.runtime.part_costs as part_costs

    config, found, device = prepare(small_config(num_actors=2))
    calls: list[str] = []

    def fake(name: str, rate: float):
        def measure(*args):
            calls.append(name)
            assert args[-1] == pytest.approx(layout.MEASURE_S / layout.ROUNDS)
            return rate

        return measure

    def choose(costs: StepCosts) -> int:
        calls.clear()
        monkeypatch.setattr(part_costs, "env_rate", fake("env", 1 / costs.env_s))
        monkeypatch.setattr(part_costs, "inference_rate", fake("inf", 1 / costs.inference_s))
        monkeypatch.setattr(part_costs, "learner_rate", fake("learner", 1 / costs.learner_s))
        n, _ = layout.choose_num_actors(config.replace(num_actors=None), found, device, cores=2)
        return n

    assert choose(CARTPOLE) == 2 and calls == ["env", "inf", "learner"]
    assert choose(DEEP) == 1 and calls == ["env", "inf", "learner"]
    assert choose(SHALLOW) == 2 and calls == ["env", "inf", "learner"] * 3
    assert choose(NATURE) == 1 and calls == ["env", "inf", "learner"] * 3
