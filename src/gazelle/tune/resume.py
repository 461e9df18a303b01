"""Continuing a population that stopped before its end (Ctrl-C, a lost driver, a reboot):
the same `gazelle tune` command, run again with the same --out, resumes it.

    OUT/population.json   what the population is (written at its first start)
    OUT/ray/              Ray Tune's experiment, which `Tuner.restore` continues: every
                          unfinished or failed member from its last Tune checkpoint (its last
                          report: gazelle's checkpoint at that frame), finished ones left as
                          they are, PBT's scheduler as it was saved

A member that was mid-segment loses the frames since its last report (it trains them again,
from that checkpoint, exactly as after a Tune pause). PBT's later random choices are not the
ones an uninterrupted population would have drawn.

`Tuner.restore` unpickles OUT/ray's state, which runs code: it is read only from a folder that
this user owns and nobody else can write to.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from gazelle.config import ConfigError
from gazelle.tune.spec import TuneSpec

#: What the population in OUT is, beside Ray Tune's experiment.
RECORD = "population.json"
#: Members' settings that may differ when a population is continued: how it prints and how
#: often it writes, not what it learns.
FREE = ("quiet", "log_interval_s", "checkpoint_interval_s", "logdir", "total_frames", "resume")


def record_of(spec: TuneSpec) -> dict[str, Any]:
    """The population's identity: every setting but where it runs (cluster, member sizes)."""
    record = {
        "population": spec.population,
        "frames": spec.frames,
        "interval": spec.interval,
        "explored": [m.describe() for m in spec.mutations],
        "starts": [dict(values) for values in spec.starts],
        "objective": spec.objective,
        "synch": spec.synch,
        "quantile": spec.quantile,
        "resample_probability": spec.resample_probability,
        "tune_seed": spec.tune_seed,
        "members": {k: v for k, v in spec.base.flat().items() if k not in FREE},
    }
    # why: compared with the JSON read back, so tuples and paths take their JSON form here too
    return dict(json.loads(json.dumps(record, default=str)))


def _trusted(folder: Path) -> None:
    """`folder` and everything in it owned by this user and writable by nobody else."""
    for path in (folder, *folder.rglob("*")):
        info = path.lstat()
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigError(
                "out",
                str(folder.parent),
                "a population folder that only you own and can write to (its Ray Tune state "
                "is unpickled, which runs code), or another --out",
                problem=f"{path} is not yours alone (owner uid {info.st_uid}, mode "
                f"{stat.filemode(info.st_mode)})",
            )


def prepare(spec: TuneSpec, can_restore: bool) -> bool:
    """Whether this run continues the population in `spec.out` (`can_restore`: Ray Tune has
    an experiment there); a ConfigError when it holds another population, when it is not
    this user's alone, or when `--no-resume` was given for it. Records a new population."""
    path = spec.out / RECORD
    record = record_of(spec)
    if not can_restore:
        path.write_text(json.dumps(record, indent=1) + "\n")
        return False
    if not spec.resume:
        raise ConfigError(
            "resume",
            False,
            "another --out, or the same command without --no-resume to continue it",
            problem=f"{spec.out} holds a population already",
        )
    saved = json.loads(path.read_text()) if path.is_file() else None
    if not isinstance(saved, dict):
        raise ConfigError(
            "out", str(spec.out), "another --out",
            problem=f"{spec.out}/ray holds a Ray Tune experiment but no {RECORD} of gazelle's",
        )  # fmt: skip
    for key in sorted(set(record) | set(saved)):
        mine, theirs = record.get(key), saved.get(key)
        if key == "members" and isinstance(mine, dict) and isinstance(theirs, dict):
            for name in sorted(set(mine) | set(theirs)):
                if mine.get(name) != theirs.get(name):
                    _differs(spec, name, mine.get(name), theirs.get(name))
        elif mine != theirs:
            _differs(spec, key, mine, theirs)
    _trusted(spec.out / "ray")
    return True


#: The record's keys that are not the flag of the same name.
FLAGS = {"explored": "mutate", "starts": "start"}


def _differs(spec: TuneSpec, key: str, mine: Any, theirs: Any) -> None:
    was = "unset (the preset's)" if theirs is None else repr(theirs)
    raise ConfigError(
        FLAGS.get(key, key),
        mine,
        f"{was}, as the population in {spec.out} that this run would continue; or another --out",
    )
