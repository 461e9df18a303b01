"""`gazelle tune` without a cluster: the explored fields checked against the config (one line
naming the bad value and what is allowed), PBT's explore kept within bounds, the members'
configs, the objective, and the summary and figure written from members' folders (checked
against hand-made journals and progress rows). The population on a loopback Ray cluster,
with its exploit: tests/test_ray.py (`test_pbt_...`)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from gazelle.cli import main
from gazelle.config import Config, ConfigError
from gazelle.errors import RunError
from gazelle.tune import Mutation, TuneSpec
from gazelle.tune.explore import Bounds, member_config, values_of
from gazelle.tune.member import objective, place
from gazelle.tune.spec import parse_starts, starting_values
from gazelle.tune.summary import write_summary


def _error(text: str, algo: str = "impala") -> str:
    with pytest.raises(ConfigError) as err:
        Mutation.parse(text, algo)
    message = str(err.value)
    assert "\n" not in message and message.startswith("--mutate: ")
    return message


def test_a_mutated_field_must_be_a_setting_of_the_algorithm_that_a_resume_can_change():
    said = _error("learnig_rate=1e-4:1e-2")
    assert "'learnig_rate=1e-4:1e-2'" in said and "not a setting of --algo impala" in said
    assert "FIELD one of: batch_size, unroll_length, learning_rate," in said
    assert "optimizer" not in said.split("FIELD one of:")[1]  # the allowed list is exact
    said = _error("optimizer=adam,rmsprop")
    assert "optimizer cannot change between members" in said
    assert "clip_ratio" in _error("clip_ratio=0.1:x", "appo")  # a3c/appo read their own
    assert "'clip_ratio' is not a setting of --algo impala" in _error("clip_ratio=0.1:0.3")
    assert "LOW 0.01 is not below HIGH 0.001" in _error("learning_rate=0.01:0.001")
    assert "reward_clipping is a str: give a list" in _error("reward_clipping=1:2")
    assert "two or more different values" in _error("unroll_length=20,20")
    assert "allowed: FIELD=LOW:HIGH (a range) or FIELD=A,B,... (a list)" in _error("batch_size")
    assert "invalid value 'nan'" in _error("entropy_cost=nan:1")


def test_a_range_or_a_list_is_read_as_the_fields_type():
    lr = Mutation.parse("learning-rate=1e-4:1e-2", "impala")
    assert (lr.name, lr.kind, lr.low, lr.high) == ("learning_rate", "float", 1e-4, 1e-2)
    assert lr.log
    gamma = Mutation.parse("discounting=0:0.999", "impala")
    assert not gamma.log  # a range from 0 is linear
    unroll = Mutation.parse("unroll_length=20,40,80", "impala")
    assert unroll.choices == (20, 40, 80) and all(isinstance(v, int) for v in unroll.choices)
    clipping = Mutation.parse("reward_clipping=abs_one,none", "impala")
    assert clipping.choices == ("abs_one", "none")


def test_pbts_explore_never_leaves_the_bounds_and_keeps_each_fields_type():
    """Ray's own explore (x0.8 / x1.2, or a fresh draw) run 300 times from the bounds'
    edges, with gazelle's `Bounds` as its custom_explore_fn: every value within bounds, ints
    stay ints, a list moves within the list. Without `Bounds`, Ray leaves the range."""
    pytest.importorskip("ray.tune", reason="needs pip install -e '.[tune]'")
    from ray.tune.schedulers.pbt import _explore

    from gazelle.tune.explore import hyperparam_mutations

    mutations = (
        Mutation.parse("learning_rate=1e-4:1e-2", "impala"),
        Mutation.parse("batch_size=4:64", "impala"),
        Mutation.parse("unroll_length=20,40,80", "impala"),
    )
    space = hyperparam_mutations(mutations)
    rng = random.Random(0)
    left = 0
    for _ in range(300):
        config = {"learning_rate": rng.choice([1e-4, 1e-2]), "batch_size": rng.choice([4, 64]),
                  "unroll_length": rng.choice([20, 80])}  # fmt: skip
        raw, _ = _explore(config, space, 0.25, (1.2, 0.8), None)
        left += not all(m.contains(raw[m.name]) for m in mutations)
        new, _ = _explore(config, space, 0.25, (1.2, 0.8), Bounds(mutations))
        assert all(m.contains(new[m.name]) for m in mutations), new
        assert type(new["batch_size"]) is int and type(new["learning_rate"]) is float
    assert left > 50  # why: the check above is not vacuous: Ray alone leaves the bounds


def test_each_members_config_is_the_base_with_its_values_logdir_seed_and_budget(tmp_path):
    base = Config.of(env="CartPole-v1", seed=7, num_actors=1)
    mutations = (Mutation.parse("learning_rate=1e-4:1e-2", "impala"),)
    spec = TuneSpec(base=base, mutations=mutations, starts=({"learning_rate": 1e-3},) * 2,
                    frames=5000, interval=1000, out=tmp_path)  # fmt: skip
    values = values_of({"learning_rate": 0.5, "start_member": 0}, mutations)
    assert values == {"learning_rate": 1e-2}  # within bounds, whatever the trial says
    config = member_config(spec, 1, values, tmp_path / "run-0")
    assert config.impala.learning_rate == 1e-2 and config.run.seed == 8
    assert config.run.total_frames == 5000 and config.run.logdir == str(tmp_path / "run-0")
    assert config.actors.num_actors == 1 and config.run.resume


def test_starting_values_are_given_one_per_member_within_bounds_or_drawn():
    mutations = (Mutation.parse("learning_rate=1e-4:1e-2", "impala"),
                 Mutation.parse("unroll_length=20,40", "impala"))  # fmt: skip
    given = parse_starts(["learning_rate=1e-4,1e-3,1e-2"], mutations, 3)
    starts = starting_values(mutations, 3, given, seed=1)
    assert [s["learning_rate"] for s in starts] == [1e-4, 1e-3, 1e-2]
    assert all(s["unroll_length"] in (20, 40) for s in starts)
    assert starts == starting_values(mutations, 3, given, seed=1)  # seeded
    for bad, why in (
        ("learning_rate=1e-4,1e-3", "3 values (one per member)"),
        ("learning_rate=1e-4,1e-3,1", "each learning_rate in [0.0001, 0.01]"),
        ("entropy_cost=1,2,3", "FIELD one of the explored: learning_rate, unroll"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_starts([bad], mutations, 3)
        assert repr(bad) in str(err.value) and why in str(err.value)


def test_gazelle_tune_refuses_bad_flags_in_one_line_before_anything_starts(tmp_path, capsys):
    common = ["tune", "--frames", "1000", "--out", str(tmp_path / "pop"), "--population", "2"]
    cases = (
        (["--mutate", "entropy=0.1:1"], "--mutate: invalid value 'entropy=0.1:1': 'entropy' is"),
        (["--mutate", "discounting=0.5:2"], "--discounting 2.0 is not allowed; allowed: a number"),
        (["--backend", "ray"], "--backend: gazelle tune sets it for each member"),
        (["--total-frames", "9"], "allowed: --frames instead"),
        (["--interval", "5000"], "--interval: invalid value 5000; allowed: at most --frames"),
        (["--ray-allow-tokenless"], "only with --ray-address"),
    )
    for flags, said in cases:
        with pytest.raises(SystemExit) as exit_:
            main([*common, *flags])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1, err
        assert said in err, err
    assert not (tmp_path / "pop").exists()


def test_without_ray_tune_installed_gazelle_tune_says_the_pip_command(tmp_path, monkeypatch):
    import importlib.util

    from gazelle.tune import driver

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a)
    )
    with pytest.raises(RunError) as err:
        driver.require_tune()
    assert str(err.value) == (
        "gazelle tune needs Ray Tune, which is not installed: pip install -e '.[tune]' "
        "(or pip install 'ray[tune]>=2.59,<3')"
    )


def test_the_objective_is_the_capped_score_of_a_multi_task_run_else_the_return():
    score = "scores/human_normalized_cap_100"
    one = {"episode_return": 12.0, "episode_return/Pong": 12.0, score: 80.0}
    assert objective(one, "auto") == 12.0  # one level: its return, uncapped
    two = {"episode_return": 5.0, "episode_return/a": 1.0, "episode_return/b": 9.0, score: 42.0}
    assert objective(two, "auto") == 42.0
    assert objective({**two, score: None}, "auto") == 5.0
    assert objective({"episode_return": None}, "auto") is None
    assert objective(two, "episode_return/b") == 9.0


class _Checkpoint:
    """What Ray Tune hands a restarted trial (`tune.get_checkpoint()`): a folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def as_directory(self):
        import contextlib

        return contextlib.nullcontext(str(self.folder))


def _tune_checkpoint(folder: Path, member: str, frames: int, data: bytes) -> _Checkpoint:
    from gazelle.tune.member import sha256

    folder.mkdir(parents=True)
    (folder / "checkpoint.pt").write_bytes(data)
    digest = sha256(folder / "checkpoint.pt")
    origin = {"member": member, "frames": frames, "values": {}, "sha256": digest}
    (folder / "member.json").write_text(json.dumps(origin))
    return _Checkpoint(folder)


def test_a_restart_continues_its_own_run_and_an_exploit_starts_a_new_one_from_the_copy(tmp_path):
    home = tmp_path / "member-1"
    home.mkdir()
    assert place(home, "member-1", {"learning_rate": 1e-7}, None) == (home / "run-0", 0)
    (home / "run-0").mkdir()
    (home / "run-0" / "checkpoint.pt").write_bytes(b"own")
    with (home / "schedule.jsonl").open("a") as file:
        row = {"event": "report", "frames": 900, "values": {"learning_rate": 1e-7}}
        file.write(json.dumps(row) + "\n")
    own = _tune_checkpoint(tmp_path / "t1", "member-1", 900, b"own")
    assert place(home, "member-1", {"learning_rate": 1e-7}, own) == (home / "run-0", 900)
    donor = _tune_checkpoint(tmp_path / "t2", "member-0", 1000, b"better")
    logdir, frames = place(home, "member-1", {"learning_rate": 3e-3}, donor)
    assert (logdir, frames) == (home / "run-1", 1000)
    assert (logdir / "checkpoint.pt").read_bytes() == b"better"  # gazelle resumes from it
    assert (home / "run-0" / "checkpoint.pt").read_bytes() == b"own"  # its own run is kept
    events = [json.loads(line) for line in (home / "schedule.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "report", "resume", "exploit"]
    exploit = events[-1]
    assert exploit["copied"] == "member-0" and exploit["frames"] == 1000
    assert exploit["own_frames"] == 900 and exploit["own_values"] == {"learning_rate": 1e-7}
    assert exploit["values"] == {"learning_rate": 3e-3} and exploit["run"] == "run-1"


def _write_member(out: Path, name: str, events: list[dict], runs: list[list[tuple]]) -> None:
    home = out / "members" / name
    home.mkdir(parents=True)
    (home / "schedule.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    for index, rows in enumerate(runs):
        (home / f"run-{index}").mkdir()
        lines = [json.dumps({"frames": f, "episode_return": r}) for f, r in rows]
        (home / f"run-{index}" / "progress.jsonl").write_text("\n".join(lines) + "\n")


def test_the_summary_gives_each_members_schedule_curve_best_and_median(tmp_path):
    """Two members' hand-made folders: member-1 started at lr 1e-7, copied member-0 at 1,000
    frames and took lr 0.004; the summary's schedules, exploits, best and median are those
    of the journals, and the figure is a PNG with both members' curves drawn."""
    lr = (Mutation.parse("learning_rate=1e-8:1e-2", "impala"),)
    spec = TuneSpec(base=Config(), mutations=lr, starts=({"learning_rate": 5e-3},
                    {"learning_rate": 1e-7}), frames=2000, interval=1000, out=tmp_path,
                    command="gazelle tune ...")  # fmt: skip
    good, bad, new = {"learning_rate": 5e-3}, {"learning_rate": 1e-7}, {"learning_rate": 4e-3}
    _write_member(tmp_path, "member-0", [
        {"event": "start", "frames": 0, "values": good},
        {"event": "report", "frames": 1000, "objective": 40.0, "values": good},
        {"event": "report", "frames": 2000, "objective": 60.0, "values": good},
    ], [[(500, 25.0), (1000, 40.0), (2000, 60.0)]])  # fmt: skip
    _write_member(tmp_path, "member-1", [
        {"event": "start", "frames": 0, "values": bad},
        {"event": "report", "frames": 1100, "objective": 20.0, "values": bad},
        {"event": "exploit", "frames": 1000, "copied": "member-0", "own_frames": 1100,
         "own_values": bad, "values": new, "run": "run-1"},
        {"event": "report", "frames": 2000, "objective": 50.0, "values": new},
    ], [[(500, 21.0), (1100, 20.0)], [(1500, 45.0), (2000, 50.0)]])  # fmt: skip
    summary = write_summary(spec)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    members = summary["members"]
    assert members["member-0"]["status"] == "done" and members["member-0"]["exploits"] == []
    assert members["member-1"]["schedule"] == [
        {"from_frames": 0, "values": bad, "source": "start"},
        {"from_frames": 1000, "values": new, "source": "copied member-0 at 1,000 frames"},
    ]
    assert members["member-1"]["exploits"][0]["own_frames"] == 1100
    assert summary["best"] == {"member": "member-0", "objective": 60.0}
    assert summary["median"] == 55.0 and summary["scored"] == "2 of 2"
    assert summary["exploits"] == 1
    page = (tmp_path / "summary.md").read_text()
    assert "| member-1 | done | 2,000 | 50 | - | 1 | learning_rate=0.004 |" in page
    assert "| 1,000 | learning_rate=0.004 | copied member-0 at 1,000 frames |" in page
    png = (tmp_path / "curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_a_member_that_failed_or_never_started_is_listed_not_dropped(tmp_path):
    lr = (Mutation.parse("learning_rate=1e-4:1e-2", "impala"),)
    spec = TuneSpec(base=Config(), mutations=lr, starts=({"learning_rate": 1e-3},) * 3,
                    frames=2000, interval=1000, out=tmp_path)  # fmt: skip
    _write_member(tmp_path, "member-0", [
        {"event": "start", "frames": 0, "values": {"learning_rate": 1e-3}},
        {"event": "report", "frames": 1000, "objective": 30.0, "values": {"learning_rate": 1e-3}},
    ], [[(1000, 30.0)]])  # fmt: skip
    _write_member(tmp_path, "member-1", [
        {"event": "start", "frames": 0, "values": {"learning_rate": 1e-3}},
        {"event": "failed", "error": "RunStopped: the actors failed"},
    ], [[]])  # fmt: skip
    summary = write_summary(spec, figure=False)
    statuses = {name: m["status"] for name, m in summary["members"].items()}
    assert statuses == {"member-0": "stopped", "member-1": "failed", "member-2": "not started"}
    assert summary["members"]["member-1"]["error"] == "RunStopped: the actors failed"
    assert summary["scored"] == "1 of 3" and math.isclose(summary["median"], 30.0)
    assert "Failed: RunStopped: the actors failed" in (tmp_path / "summary.md").read_text()


def _spec(out: Path, *flags: str) -> TuneSpec:
    from gazelle.cli import build_parser
    from gazelle.tune.flags import spec_from_args

    argv = ["tune", "--frames", "2000", "--population", "2", "--out", str(out), *flags]
    return spec_from_args(build_parser().parse_args(argv), argv[1:])


def test_a_population_is_continued_only_with_its_own_flags_and_from_a_folder_of_yours(tmp_path):
    """`gazelle.tune.resume.prepare`: a new population is recorded; the same flags continue
    it (where it runs may change); any other setting, --no-resume, a Ray Tune experiment
    without gazelle's record, or a folder someone else can write to (Ray Tune unpickles its
    state) is refused with the flag named."""
    from gazelle.tune.resume import RECORD, prepare

    out = tmp_path / "pop"
    out.mkdir(mode=0o700)
    flags = ("--start", "learning_rate=0.01,0.001", "--num-actors", "1")
    assert prepare(_spec(out, *flags), can_restore=False) is False
    record = json.loads((out / RECORD).read_text())
    assert record["frames"] == 2000 and record["members"]["num_actors"] == 1
    (out / "ray" / "member-0").mkdir(mode=0o700, parents=True)
    (out / "ray" / "tuner.pkl").write_bytes(b"state")
    (out / "ray" / "tuner.pkl").chmod(0o600)
    assert prepare(_spec(out, *flags), can_restore=True) is True
    assert prepare(_spec(out, *flags, "--member-cpus", "0.5"), can_restore=True) is True
    refused = {
        ("--frames", "3000"): "--frames: invalid value 3000; allowed: 2000, as the population in",
        ("--unroll-length", "7"): "--unroll-length: invalid value 7; allowed: unset (the preset's)",
        ("--start", "learning_rate=0.02,0.001"): "--start: invalid value [{",
        ("--mutate", "discounting=0.9:0.999"): "--mutate: invalid value [",
        ("--no-resume",): f"--resume: {out} holds a population already; allowed: another --out",
    }
    for extra, said in refused.items():
        argv = [*flags, *extra]
        if extra[0] == "--start":
            argv = ["--num-actors", "1", *extra]
        with pytest.raises(ConfigError) as err:
            prepare(_spec(out, *argv), can_restore=True)
        assert said in str(err.value), str(err.value)
    assert json.loads((out / RECORD).read_text()) == record  # a refused run changes nothing
    (out / "ray" / "member-0").chmod(0o770)
    with pytest.raises(ConfigError) as err:
        prepare(_spec(out, *flags), can_restore=True)
    assert f"--out: {out / 'ray' / 'member-0'} is not yours alone" in str(err.value)
    (out / "ray" / "member-0").chmod(0o700)
    (out / RECORD).unlink()
    with pytest.raises(ConfigError) as err:
        prepare(_spec(out, *flags), can_restore=True)
    assert "holds a Ray Tune experiment but no population.json" in str(err.value)
