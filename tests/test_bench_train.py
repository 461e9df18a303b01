"""`gazelle bench` (train): parts alone, a real run, and the limit/efficiency arithmetic."""

import json

import pytest

import gazelle.bench.parts as bench_parts
import gazelle.runtime.part_costs as part_costs
from gazelle.bench.train import learner_busy, limit, run
from gazelle.cli import main
from gazelle.config import Config


def test_limit_is_cores_over_core_seconds_per_step():
    rates = {"env": 1000.0, "inference": 4000.0, "learner": 2000.0}
    # 1/1000 + 1/4000 + 1/2000 = 0.00175 core-s per step; 2 cores; 4 frames per step
    assert limit(rates, cores=2, action_repeats=4) == pytest.approx(2 / 0.00175 * 4)


def test_learner_busy_is_update_time_over_loop_time():
    points = [
        {"timing/learner": 0.03, "timing/learner_wait": 0.01},
        {"timing/learner": 0.05, "timing/learner_wait": 0.03},
    ]
    # mean update 0.04 s, mean wait 0.02 s -> busy 2/3 of the time
    assert learner_busy(points) == pytest.approx(0.04 / 0.06)
    assert learner_busy([{"frames": 1}]) is None


def test_each_part_keeps_its_best_round(monkeypatch):
    """Interference only slows a part down, so the best of the interleaved rounds counts."""
    calls = []

    def fake(name, values):
        it = iter(values)

        def measure(*args):
            calls.append(name)
            return next(it)

        return measure

    monkeypatch.setattr(part_costs, "env_rate", fake("env", [100.0, 300.0, 200.0]))
    monkeypatch.setattr(part_costs, "inference_rate", fake("inference", [50.0, 40.0, 45.0]))
    monkeypatch.setattr(part_costs, "learner_rate", fake("learner", [7.0, 8.0, 9.0]))
    config = Config.of(env="CartPole-v1", num_actors=1, envs_per_actor=2, batch_size=2)
    parts = bench_parts.measure_parts(config, seconds=0.3, rounds=3)
    assert parts["rates"] == {
        "env_steps_per_core_s": 300.0,
        "inference_samples_per_core_s": 50.0,
        "learner_samples_per_core_s": 9.0,
    }
    # why: interleaved, so a slow spell of the machine hits every part alike
    assert calls == ["env", "inference", "learner"] * 3


@pytest.mark.slow
def test_bench_runs_real_training_and_reports_the_ratio(capsys):
    config = Config.of(
        env="CartPole-v1", num_actors=1, envs_per_actor=4, batch_size=4, unroll_length=10
    )
    out = run(config, seconds=8.0, part_seconds=0.3, cores=2)
    assert out["fps"] > 0 and out["limit_fps"] > 0
    assert out["efficiency"] == pytest.approx(out["fps"] / out["limit_fps"], abs=1e-3)
    rates = {
        k: out[k]
        for k in (
            "env_steps_per_core_s",
            "inference_samples_per_core_s",
            "learner_samples_per_core_s",
        )
    }
    assert out["limit_fps"] == pytest.approx(limit(rates, 2, 1), rel=1e-3)
    assert out["env_limit_fps"] == pytest.approx(2 * out["env_steps_per_core_s"], rel=1e-3)
    assert out["env_efficiency"] == pytest.approx(out["fps"] / out["env_limit_fps"], abs=1e-3)
    assert out["inference_batch"] == 4
    assert 0.0 <= out["learner_busy"] <= 1.0
    assert out["bound"] == ("learner" if out["learner_busy"] >= 0.9 else "actors")
    assert out["config"]["model"] == "mlp"
    printed = capsys.readouterr().out.strip().splitlines()
    assert json.loads(printed[-1])["fps"] == out["fps"]
    assert any("efficiency" in line for line in printed[:-1])


@pytest.mark.slow
def test_cli_bench_passes_flags_through(capsys):
    main(
        [
            "bench",
            "--env",
            "CartPole-v1",
            "--model",
            "mlp",
            "--num-actors",
            "1",
            "--envs-per-actor",
            "2",
            "--batch-size",
            "2",
            "--unroll-length",
            "5",
            "--seconds",
            "5",
            "--part-seconds",
            "0.2",
        ]
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["config"]["envs_per_actor"] == 2 and result["config"]["batch_size"] == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "foo"], "--model: invalid value 'foo'; allowed: auto | deep"),
        (["--inference", "gpu"], "--inference: invalid value 'gpu'; allowed: auto | local"),
        (["--env", "Nope-v0"], "--env: invalid value 'Nope-v0'"),
        (["--algo", "appo"], "--algo: invalid value 'appo'; allowed: impala | a3c"),
    ],
)
def test_cli_bench_bad_flag_is_one_line(capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *flags, "--seconds", "1", "--part-seconds", "0.1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"gazelle bench: error: {message}" in err
    assert "Traceback" not in err


def test_bench_help_says_how_num_actors_is_chosen_and_that_its_flags_are_its_own(capsys):
    """It said "the cores but one" while an IMPALA run on a CPU learner measures its layout,
    and docs said bench took "the same flags" as train."""
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "measures what an agent step costs in acting and in learning at start-up" in out
    assert "the cores but one" not in out
    assert "It takes only the flags listed below (not every flag of `gazelle train`)" in out
