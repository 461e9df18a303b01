"""Continuing a saved run: the settings a command or an API call takes when its logdir holds
a run it would resume. `gazelle train --logdir DIR --total-frames N` and
`gazelle.train({"logdir": DIR, "total_frames": N})` both continue that run as it was (its
algorithm, env, model, preset values), with what was given on top, except where it runs
(`PLACEMENT`), which is named again or not used."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gazelle.algorithms.imports import check_saved
from gazelle.algorithms.runstate import CONFIG_FILE, saved_config
from gazelle.config import Config, ConfigError

#: Where a run goes: never taken from a saved config, so that a copied run folder cannot
#: send this machine's token to the cluster it names (the user names them again).
PLACEMENT = ("backend", "ray_address", "ray_dashboard", "ray_allow_tokenless")


def saved_run(values: Mapping[str, Any]) -> Config | None:
    """The config of the run that `values["logdir"]` holds and this call would resume (a
    checkpoint and a readable `config.json` there, and `resume` not False); else None."""
    if values.get("logdir") is None or values.get("resume") is False:
        return None
    logdir = Path(str(values["logdir"]))
    if not (logdir / "checkpoint.pt").is_file():
        return None
    try:
        return saved_config(json.loads((logdir / CONFIG_FILE).read_text()))
    except (OSError, ValueError, TypeError, ConfigError):
        return None  # why: the preflight check names what is wrong with the directory


def continue_saved(
    values: Mapping[str, Any],
    algo_given: str | None,
    allow_import: Iterable[str] = (),
    given: Iterable[str] | None = None,
) -> Config | None:
    """The config that continues the run `values` would resume: its saved (resolved)
    settings, `values` on top, where it runs (`PLACEMENT`) from `values` only; None when
    there is no such run, or `algo_given` names another algorithm (the preflight then
    refuses the directory in one line).

    Raises `ConfigError` when a saved torso or env (or one of `values` that is not in
    `given`, e.g. from a settings file; default: all of `values` were given) would import a
    module that `allow_import` does not name and this process has not imported."""
    saved = saved_run(values)
    if saved is None or algo_given not in (None, saved.algo):
        return None
    kept = {k: v for k, v in saved.flat().items() if k not in PLACEMENT}
    say_placement_not_restored(saved, values)
    # why: the saved settings are the resolved ones (layout, preset values), so the run
    # continues as it was; a value given still wins (the preflight refuses a changed env).
    config = Config.from_flat({**kept, **values})
    named = set(values if given is None else given)
    taken = [name for name in ("model", "env") if name not in named]  # saved or a file's
    check_saved(config, values["logdir"], allow_import, taken)
    return config


def say_placement_not_restored(saved: Config, values: Mapping[str, Any]) -> None:
    """One line when the run was saved with a backend, cluster or dashboard that this
    command does not name again (it runs where the command says, by default here)."""
    default = Config()
    dropped = [
        f"--{name.replace('_', '-')} {saved.get(name)}"
        for name in PLACEMENT
        if name not in values and saved.get(name) != default.get(name)
    ]
    if dropped:
        print(
            f"gazelle: the run was saved with {' '.join(dropped)}; a resume takes where to run "
            "from this command only (name them again to use them)"
        )
