"""`gazelle train --config FILE`: a run's config.json, or a JSON/TOML/YAML file of the same
fields (flat or by section), read as if its settings were typed before the flags."""

from __future__ import annotations

import json

import pytest

from gazelle.algorithms.runstate import write_config
from gazelle.cli import build_parser, config_from_args
from gazelle.config import Config, ConfigError


def parse(*argv: str) -> Config:
    return config_from_args(build_parser().parse_args(["train", *argv]))


def test_a_runs_config_json_repeats_it_and_flags_override(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    saved = Config.of(algo="appo", env="ALE/Pong-v5", batch_size=8, learning_rate=0.001,
                      epochs=3, use_lstm=True, seed=7, logdir="runs/old",
                      backend="ray", ray_address="10.0.0.5:6379")  # fmt: skip
    (tmp_path / "old").mkdir()
    write_config(tmp_path / "old", saved)
    config = parse("--config", "old/config.json", "--batch-size", "4")
    assert (config.algo, config.env.id, config.run.seed) == ("appo", "ALE/Pong-v5", 7)
    assert (config.algorithm.learning_rate, config.algorithm.epochs) == (0.001, 3)
    assert config.algorithm.batch_size == 4 and config.model.use_lstm is True  # the flag wins
    # why: a file never says where the run goes or writes: a fresh folder, this machine
    assert config.run.logdir is not None and config.run.logdir.startswith("runs/ALE_Pong-v5-")
    assert (config.actors.backend, config.actors.ray_address) == ("local", None)
    out = capsys.readouterr().out
    assert "--backend, --ray-address, --logdir not taken from a file" in out


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("flat.toml", 'env = "ALE/Pong-v5"\nbatch_size = 8\nentropy_cost = 0.01\n'),
        ("sections.toml", '[env]\nid = "ALE/Pong-v5"\n[impala]\nbatch_size = 8\n'
                          "entropy_cost = 0.01\n"),
        ("flat.yaml", "env: ALE/Pong-v5\nbatch_size: 8\nentropy_cost: 0.01\n"),
        ("flat.json", '{"env": "ALE/Pong-v5", "batch_size": 8, "entropy_cost": 0.01}'),
    ],
)  # fmt: skip
def test_a_settings_file_flat_or_by_section(name, text, tmp_path):
    (tmp_path / name).write_text(text)
    config = parse("--config", str(tmp_path / name), "--logdir", str(tmp_path / "run"))
    assert (config.algo, config.env.id, config.impala.batch_size) == ("impala", "ALE/Pong-v5", 8)
    assert config.impala.entropy_cost == 0.01 and config.impala.learning_rate is None  # unset


def test_a_file_with_one_algorithms_section_runs_that_algorithm(tmp_path):
    (tmp_path / "a3c.toml").write_text("[a3c]\nlearning_rate = 0.0002\n")
    config = parse("--config", str(tmp_path / "a3c.toml"), "--logdir", str(tmp_path / "r"))
    assert config.algo == "a3c" and config.a3c.learning_rate == 0.0002


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("typo.toml", "batchsize = 8\n", "sets what gazelle has no setting for: batchsize"),
        ("typo2.toml", "[impala]\nbatchsize = 8\n", "no setting for: impala.batchsize"),
        ("bad.toml", "batch_size = \n", "--config: "),
        ("list.json", "[1, 2]", "a file whose top level is a table of settings"),
        ("run.ini", "x", "allowed: a settings file: .json | .toml | .yaml | .yml"),
        ("missing.json", None, "missing.json"),
    ],
)
def test_a_bad_settings_file_is_one_line_naming_it(name, text, message, tmp_path):
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=r"^--config: ") as err:
        parse("--config", str(tmp_path / name))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_files_torso_module_is_not_imported_unasked(tmp_path):
    """A file may come from someone else: as a run folder, it imports nothing unasked."""
    (tmp_path / "s.json").write_text(json.dumps({"model": "gz_never_imported_mod:Torso"}))
    with pytest.raises(ConfigError, match=r"--allow-import: .*gz_never_imported_mod"):
        parse("--config", str(tmp_path / "s.json"), "--logdir", str(tmp_path / "r"))
    allowed = parse("--config", str(tmp_path / "s.json"), "--logdir", str(tmp_path / "r"),
                    "--allow-import", "gz_never_imported_mod")  # fmt: skip
    assert allowed.model.torso == "gz_never_imported_mod:Torso"
