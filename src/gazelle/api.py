"""`gazelle.train`: a training run from Python, with the same config, logs and checkpoints as
`gazelle train` (docs/api.md).

    import gazelle

    result = gazelle.train(gazelle.Config.of(env="CartPole-v1"), total_frames=200_000)
    print(result.recent_return, result.logdir)
    gazelle.evaluate(result.logdir, episodes=5)

Torsos and envs of the user's own are registered with `gazelle.register_torso` and
`gazelle.register_env` (`gazelle.plugins`), which reach the actor processes too.
"""

from __future__ import annotations

import multiprocessing.process
from collections.abc import Callable, Mapping
from typing import Any

from gazelle.algorithms.runstate import TrainResult
from gazelle.config import Config, ConfigError, registry
from gazelle.config.presets import default_algo
from gazelle.runtime.learner import LossFn


def _check_not_spawn_import() -> None:
    """Raise if this process is a spawned child still importing the user's script."""
    # why: `spawn` re-imports the main script in every actor process; a call to `train` at
    # the script's top level would start a whole run there (and fail deep inside
    # multiprocessing). `_inheriting` is what multiprocessing itself checks for this.
    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        raise RuntimeError(
            "gazelle.train() was called while an actor process was importing your script "
            "(actors start with spawn, which re-imports it); call it under "
            "`if __name__ == '__main__':`"
        )


def train(
    config: Config | Mapping[str, Any] | None = None,
    /,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    loss_fn: LossFn | None = None,
    **overrides: Any,
) -> TrainResult:
    """Train with `config` and return what the run reached.

    Args:
        config: a `gazelle.Config`, a mapping of flat names (`{"env": "CartPole-v1"}`, the
            names of `gazelle train --help` with underscores), or None for the defaults. A
            mapping without "algo" gets `gazelle train`'s choice (a named preset's
            algorithm, else appo for ViZDoom ids, impala otherwise); a Config's `algo` is
            impala unless set. A mapping whose "logdir" holds a run to resume continues
            that run: its saved settings, the mapping's on top (as `gazelle train --logdir
            DIR`; where it runs, backend and Ray address, is never taken from the folder).
        on_progress: called with each progress row (the dict written to progress.jsonl) at
            every `log_interval_s`.
        loss_fn: `(agent, batch) -> (loss, metrics)`, replacing IMPALA's V-trace loss (the
            algorithm seam; IMPALA only).
        **overrides: flat names set on top of `config` (`total_frames=10_000`,
            `logdir="runs/x"`).

    Returns:
        `TrainResult`: frames, updates, episodes, recent_return (mean of the last episodes),
        level_returns, fps, logdir, interrupted, actor_restarts, dropped_unrolls.

    Raises:
        ConfigError: a bad setting (one line naming it and what is allowed), before any
            process starts.
        TypeError: `config` is neither a Config, a mapping nor None.
        RuntimeError: called while a spawned actor imports the script (no main guard).
    """
    _check_not_spawn_import()
    if config is None:
        config = Config()
    elif isinstance(config, Mapping):
        config, overrides = _from_mapping({**config, **overrides}), {}
    elif not isinstance(config, Config):
        raise TypeError(
            f"config {config!r}: not a gazelle config; allowed: gazelle.Config (e.g. "
            "Config.of(env='CartPole-v1')), a dict of settings, or None"
        )
    if overrides:
        config = config.replace(**overrides)
    if loss_fn is None:
        from gazelle.algorithms import train as train_algorithm

        result: TrainResult = train_algorithm(config, on_progress)
        return result
    algorithm = registry.algorithm(config.algo)
    if not algorithm.takes_loss_fn:
        takers = [a.name for a in registry.algorithms() if a.takes_loss_fn]
        raise ConfigError(
            "algo", config.algo, f"{' | '.join(takers)} (loss_fn replaces IMPALA's V-trace loss)"
        )
    result = algorithm.train(config, on_progress, loss_fn=loss_fn)
    assert isinstance(result, TrainResult)
    return result


def _from_mapping(values: dict[str, Any]) -> Config:
    """The config of a mapping of flat names, as `gazelle train` makes it of its flags."""
    from gazelle.algorithms.continuing import continue_saved

    # why: as `gazelle train --logdir DIR`: a logdir holding a run continues that run's
    # settings, so a mapping names only what it changes (the budget, say).
    continued = continue_saved(values, values.get("algo"))
    if continued is not None:
        return continued
    # why: as `gazelle train` without --algo: a mapping that names no algorithm gets the
    # env family's (APPO for ViZDoom); a Config's algo is always set (impala unless given).
    if "algo" not in values:
        values["algo"] = default_algo(
            str(values.get("env") or Config().env.id), values.get("preset")
        )
    return Config.from_flat(values)
