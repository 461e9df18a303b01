"""The registry of algorithms and backends (`gazelle.config.registry`): a new algorithm and a
new backend each land as one folder (`tests/toy_algorithm/`, `tests/toy_backend/`) and one
registry line (the fixtures' `register_*` call), and the config, presets, validation, layout
rule, CLI and loops find them there, with nothing else of gazelle touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toy_algorithm
import toy_backend
from gazelle.cli import build_parser, main
from gazelle.config import Config, ConfigError, algorithm_fields, registry, validate


@pytest.fixture
def toy():
    registry.register_algorithm(toy_algorithm.TOY)  # the toy algorithm's one registry line
    yield toy_algorithm.TOY
    registry.unregister("toy")


@pytest.fixture
def threads():
    registry.register_backend(toy_backend.THREADS)  # the toy backend's one registry line
    yield toy_backend.THREADS
    registry.unregister("threads")


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `gazelle` prints for a refused command (exit status 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def rows(logdir: Path) -> list[dict]:
    return [json.loads(line) for line in (logdir / "progress.jsonl").read_text().splitlines()]


#: A CartPole run of a few seconds through `gazelle train`.
SMALL = ["--env", "CartPole-v1", "--envs-per-actor", "2", "--batch-size", "4",
         "--unroll-length", "10", "--log-interval-s", "0.5", "--total-frames", "2000"]  # fmt: skip


def test_the_built_ins_are_named_once_and_loaded_from_their_folders():
    assert registry.algorithm_names() == ("impala", "a3c", "appo")
    assert registry.backend_names() == ("local", "ray")
    for descriptor in registry.algorithms():
        assert type(descriptor).__module__ == "gazelle.config.registry"
        assert descriptor.train.__module__ == f"gazelle.algorithms.{descriptor.name}"
        assert descriptor.section.__module__.startswith(f"gazelle.algorithms.{descriptor.name}.")
    for backend in registry.backends():
        assert backend.build.__module__ == f"gazelle.backends.{backend.name}"
    # why: the config layer names them only as references into the layers above it
    refs = {**registry.BUILT_IN_ALGORITHMS, **registry.BUILT_IN_BACKENDS}.values()
    assert all(ref.startswith(("gazelle.algorithms.", "gazelle.backends.")) for ref in refs)


def test_an_algorithms_section_is_read_by_its_name_and_compared_by_value():
    config = Config.of(algo="appo", batch_size=8, epochs=3)
    assert config.appo is config.section("appo") is config.algorithm
    assert (config.appo.batch_size, config.appo.epochs, config.impala.batch_size) == (8, 3, None)
    # set back to the defaults: the same config (equal, same hash), whatever the path
    back = config.replace(batch_size=None, epochs=None).replace(algo="impala")
    assert back == Config() and hash(back) == hash(Config()) and back.sections == ()
    assert Config.from_dict(config.to_dict()) == config
    assert list(config.to_dict())[-3:] == ["impala", "a3c", "appo"]  # config.json's sections
    with pytest.raises(AttributeError, match="no attribute 'ppo'"):
        config.ppo  # noqa: B018


def test_a_name_is_taken_once(toy):
    registry.register_algorithm(toy)  # the same one again: nothing happens
    other = toy_algorithm.Algorithm(name="impala", section=toy.section, train=toy.train)
    with pytest.raises(ValueError, match="algorithm name 'impala' is taken"):
        registry.register_algorithm(other)
    with pytest.raises(KeyError, match="'impala' is not a registered"):
        registry.unregister("impala")  # a built-in stays
    with pytest.raises(ConfigError, match=r"^--algo: invalid value 'nope'; allowed: .* \| toy$"):
        registry.algorithm("nope")


def test_the_toy_algorithm_gets_its_flags_preset_and_checks(toy, capsys, small_config):
    parser = build_parser()
    train = next(a for a in parser._actions if a.dest == "command").choices["train"]
    help_text = " ".join(train.format_help().split())
    assert "--toy-gae-lambda" in help_text and "impala | a3c | appo | toy" in help_text
    assert "toy_gae_lambda" in algorithm_fields("toy")
    with pytest.raises(
        ConfigError, match="not a setting of --algo impala; allowed: with --algo toy"
    ):
        Config.of(toy_gae_lambda=0.5)
    line = cli_error(["train", "--algo", "toy", "--toy-gae-lambda", "2", *SMALL], capsys)
    assert line.endswith("--toy-gae-lambda: invalid value 2.0; allowed: a number in [0.0, 1.0]")
    with pytest.raises(ConfigError, match="--preset: invalid value 'universe-starter'"):
        validate(Config.of(algo="toy", preset="universe-starter"))
    from gazelle.algorithms.common import prepare

    config, _, _ = prepare(small_config(algo="toy", num_actors=2))
    assert config.toy.toy_gae_lambda == 0.95 and config.toy.learning_rate == 0.004  # preset
    assert config.impala.learning_rate is None  # IMPALA's section is not the one that ran


def test_an_unregistered_algorithm_is_refused_naming_the_others(capsys):
    line = cli_error(["train", "--algo", "toy", *SMALL], capsys)
    assert line.endswith("--algo: invalid value 'toy'; allowed: impala | a3c | appo")


@pytest.mark.slow
def test_the_toy_algorithm_trains_through_gazelle_train(toy, tmp_path, capsys):
    """`gazelle train --algo toy`: the layout rule sizes the actors by the toy's learner
    cost, its preset fills its lambda, its loss trains, config.json keeps its section."""
    assert main(["train", "--algo", "toy", *SMALL, "--logdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "gazelle: layout: " in out and "acting" in out  # measured: the toy's learner cost
    trained = [r for r in rows(tmp_path) if "toy/gae_lambda" in r]
    assert trained and all(r["toy/gae_lambda"] == pytest.approx(0.95) for r in trained)
    assert trained[-1]["frames"] >= 2000
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["algo"] == "toy" and saved["toy"]["toy_gae_lambda"] == 0.95


@pytest.mark.slow
def test_the_toy_backend_trains_impala_through_gazelle_train(threads, tmp_path, capsys):
    """`gazelle train --backend threads`: IMPALA's actors run as threads of this process,
    the learner trains on their unrolls; the Ray backend's flags are refused there, and an
    algorithm with workers is refused naming the backends that run them."""
    built = len(toy_backend.BUILT)
    argv = ["train", *SMALL, "--backend", "threads", "--num-actors", "2", "--logdir", str(tmp_path)]
    assert main(argv) == 0
    fleet = toy_backend.BUILT[built]
    assert len(fleet.threads) == 2 and not fleet.errors
    last = rows(tmp_path)[-1]
    assert last["frames"] >= 2000 and last["episodes/CartPole-v1"] > 0  # the actors played
    line = cli_error([*argv, "--ray-address", "127.0.0.1:1"], capsys)
    assert line.endswith("only with --backend ray (now: threads)")
    line = cli_error(["train", "--algo", "a3c", *SMALL[:2], "--backend", "threads",
                      "--num-actors", "1", "--logdir", str(tmp_path / "a3c")], capsys)  # fmt: skip
    assert line.endswith("--backend: 'threads' runs no workers; allowed: local | ray")
