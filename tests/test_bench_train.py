"""`gazelle bench` (train): parts alone, a real run, and the limit/efficiency arithmetic."""

import json

import pytest

from gazelle.bench.train import limit, run
from gazelle.cli import main
from gazelle.config import ImpalaConfig


def test_limit_is_cores_over_core_seconds_per_step():
    rates = {"env": 1000.0, "inference": 4000.0, "learner": 2000.0}
    # 1/1000 + 1/4000 + 1/2000 = 0.00175 core-s per step; 2 cores; 4 frames per step
    assert limit(rates, cores=2, action_repeats=4) == pytest.approx(2 / 0.00175 * 4)


@pytest.mark.slow
def test_bench_runs_real_training_and_reports_the_ratio(capsys):
    config = ImpalaConfig(
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
    assert out["inference_batch"] == 4
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
