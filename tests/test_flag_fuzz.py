"""Every flag of `gazelle train`, `test`, `bench` and `plot`, fed bad values: NaN, inf,
1e400, -1, 0, empty, and a path that cannot be written. Each is refused with one line and
exit code 2 (never a traceback, never a process started), or, where the value is one the
flag allows (`ACCEPTED`, the contract), the command gets as far as the point where its run
would start, and stops there (`WouldStart`): parsing and validation only, no run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys

import pytest

from gazelle.cli import build_parser, main
from gazelle.config import algorithm_fields, common_fields

UNWRITABLE = "/proc/gazelle-cannot-write-here/x"
BAD = ["nan", "inf", "1e400", "-1", "0", "", UNWRITABLE]

#: flag -> the bad values it allows (everything else is refused).
TRAIN_ACCEPTED = {
    "--seed": {"0"},
    "--target-return": {"-1", "0"},
    "--inference-max-wait-ms": {"0"},
    "--decay": {"0"},
    "--momentum": {"0"},
    "--discounting": {"0"},
    "--entropy-cost": {"0"},
    "--baseline-cost": {"0"},
    "--vtrace-lambda": {"0"},
    "--gae-lambda": {"0"},
    # a log standard deviation: any finite number (e^-1, e^0)
    "--initial-log-std": {"-1", "0"},
    # a probability in [0, 1): 0 is the documented "off"
    "--obs-flicker": {"0"},
    # a name: any text but empty
    "--wandb-project": {"nan", "inf", "1e400", "-1", "0", UNWRITABLE},
    # a directory: made where it is missing (here under the test's cwd), not where it
    # cannot be written
    "--logdir": {"nan", "inf", "1e400", "-1", "0"},
    # 'inf' is the documented "no clipping" (A3C's preset for vector tasks); 1e400 is not
    "--grad-norm-clip": {"inf"},
    # a module's name (nothing names these, so nothing is imported)
    "--allow-import": {"nan", "inf"},
}
TEST_ACCEPTED = {"--seed": {"0"}, "--video": {"0"}, "--allow-import": {"nan", "inf"}}
PLOT_ACCEPTED = {"--out": {"nan", "inf", "1e400", "-1", "0"}}


class WouldStart(Exception):
    """The command got as far as starting its run; the test stops it there."""


def options(parser: argparse.ArgumentParser) -> list[str]:
    """Every long option of `parser` but --help (and --no-X of a boolean flag)."""
    found = []
    for action in parser._actions:
        flags = [f for f in action.option_strings if f.startswith("--") and f != "--help"]
        found += flags[:1]
    return found


def subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def run_cli(argv: list[str], capsys) -> tuple[str, str]:
    """`gazelle ARGV`: ("refused", its stderr line) or ("accepted", "")."""
    before = set(multiprocessing.active_children())
    try:
        main(argv)
    except WouldStart:
        return "accepted", ""
    except SystemExit as exit_info:
        err = capsys.readouterr().err
        assert exit_info.code == 2, (argv, exit_info.code, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, (argv, err)
        return "refused", err
    finally:
        assert set(multiprocessing.active_children()) == before, (argv, "a process started")
        ray = sys.modules.get("ray")
        assert ray is None or not ray.is_initialized(), (argv, "Ray was started")
    raise AssertionError(f"gazelle {argv}: neither refused nor stopped at the start")


def check_all(command: list[str], flags: list[str], base, accepted, capsys) -> None:
    """Every flag x every bad value: refused in one line naming the flag or value, unless
    `accepted` says the flag takes it (then it must get to the start)."""
    wrong = []
    for flag in flags:
        for value in BAD:
            outcome, err = run_cli([*command, *base(flag), flag, value], capsys)
            expected = "accepted" if value in accepted.get(flag, ()) else "refused"
            if outcome != expected:
                wrong.append(f"{flag} {value!r}: {outcome}, expected {expected} {err}")
            elif outcome == "refused" and not (flag in err or (value or repr(value)) in err):
                wrong.append(f"{flag} {value!r}: the line names neither: {err}")
    assert not wrong, "\n".join(wrong)


@pytest.fixture
def stop_at_start(monkeypatch):
    """`prepare` (validation, the env probe, the logdir's checks) runs; what follows it
    (actors, Ray, the learner) does not."""
    import importlib

    from gazelle.algorithms import common, runlock

    # why: import_module, as the packages re-export functions of the same names
    a3c_loop = importlib.import_module("gazelle.algorithms.a3c.loop")
    impala_build = importlib.import_module("gazelle.algorithms.impala.build")
    real = common.prepare

    def prepare_then_stop(config):
        prepared = real(config)
        runlock.release(prepared[0].run.logdir)
        raise WouldStart

    for module in (common, a3c_loop, impala_build):
        monkeypatch.setattr(module, "prepare", prepare_then_stop)


def test_every_train_flag_refuses_bad_values_in_one_line(
    tmp_path, monkeypatch, capsys, stop_at_start
):
    monkeypatch.chdir(tmp_path)
    owner = {name: "impala" for name in common_fields()}
    for algo in ("impala", "a3c", "appo"):
        for name in algorithm_fields(algo):
            owner.setdefault(name, algo)

    def base(flag: str) -> list[str]:
        algo = owner.get(flag[2:].replace("-", "_"), "impala")
        small = ["--env", "CartPole-v1", "--num-actors", "1", "--envs-per-actor", "2"]
        if algo != "a3c":
            small += ["--batch-size", "2", "--unroll-length", "5"]
        # why: the given flag comes last and wins over the base's
        algo_flag = [] if flag == "--algo" else ["--algo", algo]
        return [*algo_flag, *small, "--logdir", str(tmp_path / "run")]

    flags = options(subparser("train"))
    assert len(flags) > 60 and "--learning-rate" in flags and "--allow-import" in flags
    check_all(["train"], flags, base, TRAIN_ACCEPTED, capsys)


def test_every_test_flag_refuses_bad_values_in_one_line(tmp_path, monkeypatch, capsys):
    from gazelle import evaluation

    monkeypatch.chdir(tmp_path)
    run = write_run(tmp_path / "run")
    monkeypatch.setattr(evaluation, "run_episodes", stop)
    flags = options(subparser("test"))
    assert set(flags) >= {"--logdir", "--episodes", "--seed", "--video", "--greedy"}
    check_all(["test"], flags, lambda flag: ["--logdir", str(run)], TEST_ACCEPTED, capsys)


@pytest.mark.parametrize("what", ["train", "models", "env"])
def test_every_bench_flag_refuses_bad_values_in_one_line(what, tmp_path, monkeypatch, capsys):
    from gazelle.bench import env, models
    from gazelle.bench import train as bench_train

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_train, "run", stop)
    monkeypatch.setattr(models, "run", stop)
    monkeypatch.setattr(env, "measure_env", stop)
    flags = options(bench_train.build_parser()) if what == "train" else bench_flags(what)
    assert len(flags) >= 3
    base = ["--env", "CartPole-v1"] if what != "models" else []
    accepted = {"--seconds-per-case": {"0"}}  # models: one call per case
    check_all(["bench", what], flags, lambda flag: base, accepted, capsys)


def test_every_plot_flag_refuses_bad_values_in_one_line(tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure

    monkeypatch.chdir(tmp_path)
    run = write_progress(tmp_path / "run")
    monkeypatch.setattr(Figure, "savefig", stop)
    flags = options(subparser("plot"))
    assert set(flags) == {"--out", "--x", "--y"}
    check_all(["plot"], flags, lambda flag: [str(run)], PLOT_ACCEPTED, capsys)
    for value in BAD:  # the run directories themselves
        outcome, err = run_cli(["plot", value], capsys)
        assert outcome == "refused", (value, err)


def stop(*args, **kwargs):
    raise WouldStart


def bench_flags(what: str) -> list[str]:
    """The flags of `gazelle bench models|env` (their parsers are built inside main)."""
    from gazelle.config.flags import OneLineParser

    seen: list[str] = []
    real = OneLineParser.parse_args

    def record(self, args=None, namespace=None):
        seen.extend(options(self))
        raise WouldStart

    OneLineParser.parse_args = record  # type: ignore[method-assign]
    try:
        with pytest.raises(WouldStart):
            main(["bench", what])
    finally:
        OneLineParser.parse_args = real  # type: ignore[method-assign]
    return seen


def write_run(logdir):
    """A run `gazelle test` can load: CartPole, an untrained agent's checkpoint."""
    from gazelle.algorithms.runstate import save, write_config
    from gazelle.config import Config
    from gazelle.envs import make, obs_spec
    from gazelle.models import build_agent

    logdir.mkdir()
    config = Config.of(env="CartPole-v1", model="mlp", use_lstm=False, logdir=str(logdir))
    env = make("CartPole-v1")
    agent = build_agent(obs_spec(env), "mlp", False)
    env.close()
    write_config(logdir, config)

    class NoOptimizer:
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    save(logdir / "checkpoint.pt", config, agent, NoOptimizer(), 0, 0, 0, ["CartPole-v1"])
    return logdir


def write_progress(logdir):
    """A run `gazelle plot` can draw: a few progress rows with returns."""
    import json

    logdir.mkdir()
    rows = [{"frames": 100 * i, "time": float(i), "episode_return": float(i)} for i in range(5)]
    (logdir / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return logdir


def test_every_numeric_setting_refuses_nonfinite_values_from_python():
    """The same refusal for a `Config` built in Python (`gazelle.train(config)`), where no
    flag parser runs: `validate` checks every number (NaN passes every `<=` test)."""
    from gazelle.config import Config, ConfigError, all_fields, validate

    numeric = {n: f for n, f in all_fields().items() if f.type.split(" ")[0] in ("int", "float")}
    assert len(numeric) > 30
    for name, flat in numeric.items():
        algo = next(
            a
            for a in ("impala", "a3c", "appo")
            if name in {**common_fields(), **algorithm_fields(a)}
        )
        floats = flat.type.startswith("float")
        bad = [float("nan"), float("inf"), float("-inf")] if floats else [2**63, -(2**63) - 1]
        for value in bad:
            if value == float("inf") and name == "grad_norm_clip":
                continue  # documented: no clipping
            config = Config.of(algo=algo, env="CartPole-v1").replace(**{name: value})
            with pytest.raises(ConfigError) as error:
                validate(config)
            assert str(error.value).startswith("--" + name.replace("_", "-")), (name, value)
