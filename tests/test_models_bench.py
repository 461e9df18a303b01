"""`gazelle.bench.models`: a tiny run returns the documented figures and restores threads."""

from __future__ import annotations

import json

import pytest
import torch

from gazelle.bench import models as bench


def test_run_reports_every_case_and_restores_threads(capsys):
    threads = torch.get_num_threads()
    report = bench.run(
        torsos=["mlp"],
        batch_sizes=(1, 2),
        unroll_length=2,
        learner_batch=2,
        seconds_per_case=0.0,
        precision="both",
    )
    assert torch.get_num_threads() == threads
    result = report["results"]["mlp"]
    assert set(result["act"]) == {"1", "2"} and set(result["learner"]) == {"fp32", "bf16"}
    assert all(v > 0 for v in [*result["act"].values(), *result["learner"].values()])
    assert report["threads"] == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert "1 torch thread" in lines[0]
    assert lines[2].startswith("mlp")
    assert json.loads(lines[-1]) == report


def test_main_parses_arguments(capsys):
    assert (
        bench.main(
            [
                "--torsos",
                "mlp",
                "--batch-sizes",
                "1",
                "--unroll-length",
                "2",
                "--learner-batch",
                "2",
                "--seconds-per-case",
                "0",
                "--precision",
                "fp32",
                "--channels-last",
                "on",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["results"]["mlp"]["channels_last"] == {"act": True, "learn": True}
    assert list(report["results"]["mlp"]["learner"]) == ["fp32"]


def test_unknown_torso_or_precision_is_rejected():
    with pytest.raises(ValueError, match="unknown torso"):
        bench.run(torsos=["resnet"], verbose=False)
    with pytest.raises(ValueError, match="unknown precision"):
        bench.run(torsos=["mlp"], precision="fp8", verbose=False)
