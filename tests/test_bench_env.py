"""`gazelle bench env`: one bare env and a `SerialEnvs` batch, the table and the JSON line,
and one-line errors for bad flags."""

from __future__ import annotations

import json

import pytest

from gazelle import cli
from gazelle.bench import env as bench_env

RATES = ("steps_per_s", "steps_per_cpu_s", "frames_per_s", "frames_per_cpu_s")


def test_prints_a_table_and_a_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "env", "--env", "CartPole-v1", "--envs", "3", "--seconds", "0.2"]
    assert cli.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5
    assert "steps/s" in lines[1] and "steps/CPU-s" in lines[1] and "frames/s" in lines[1]
    assert lines[2].split()[:4] == ["one", "env", "(env.step)", "1"]
    assert lines[3].split()[:2] == ["SerialEnvs", "3"]
    result = json.loads(lines[4])
    assert result["env"] == "CartPole-v1" and result["num_envs"] == 3
    assert result["action_repeats"] == 1
    for case in ("single", "batch"):
        assert result[f"{case}_steps_per_s"] > 100 and result[f"{case}_steps_per_cpu_s"] > 100
        assert result[f"{case}_frames_per_s"] == result[f"{case}_steps_per_s"]
    # the table shows the JSON's figures
    assert f"{result['batch_steps_per_s']:,.0f}" in lines[3]


def test_frames_count_the_action_repeats() -> None:
    result = bench_env.run("ALE/Breakout-v5", seconds=0.2, num_envs=2)
    assert result["action_repeats"] == 4
    for case in ("single", "batch"):
        steps, frames = result[f"{case}_steps_per_s"], result[f"{case}_frames_per_s"]
        assert steps > 0 and frames == pytest.approx(4 * steps, abs=1.0)
        assert all(result[f"{case}_{rate}"] > 0 for rate in RATES)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--envs", "0"], "argument --envs: invalid value '0'; allowed: an integer of at least 1"),
        (["--seconds", "0"], "argument --seconds: invalid value '0'; allowed: a number greater"),
        (["--env", "Nope-v9"], "--env: unknown environment 'Nope-v9'"),
    ],
)
def test_bad_flags_exit_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["bench", "env", *argv])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"gazelle bench env: error: {message}")
