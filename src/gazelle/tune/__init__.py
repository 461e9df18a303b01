"""`gazelle tune`: population-based training (PBT) of gazelle runs on Ray Tune's
`PopulationBasedTraining` scheduler (docs/tune.md).

    spec.py     the population: members, budget, interval, explored fields and bounds
    flags.py    the spec read from `gazelle tune`'s flags
    explore.py  PBT's search space and bounded explore; a member's values as a Config
    member.py   one member: a Tune trial training a gazelle run in segments, reporting
                its objective and checkpoint; an exploit resumes another member's
    driver.py   the cluster (private by default), the Tuner, then the summary
    resume.py   a population that stopped, continued by the same command
    summary.py  summary.json and summary.md; figure.py: curves.png

This package is the face of the project (like `suite/`): it drives whole runs through
`gazelle.train` and knows no algorithm beyond the config's fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gazelle.tune.spec import Mutation, TuneSpec

if TYPE_CHECKING:
    from gazelle.tune.driver import run_tune

__all__ = ["Mutation", "TuneSpec", "run_tune"]


def __getattr__(name: str) -> Any:
    # why: `gazelle tune --help` reads `gazelle.tune.flags`, which imports this package;
    # the driver (a member's training, torch) is imported when a population runs.
    if name == "run_tune":
        from gazelle.tune.driver import run_tune

        return run_tune
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
