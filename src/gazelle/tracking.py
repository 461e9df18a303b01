"""Where a run's logs go, chosen from its config: the console (a rich display on a terminal,
plain lines otherwise, nothing per interval with `--quiet`), TensorBoard and
``progress.jsonl`` (`RunLogger`), and Weights & Biases with `--wandb` (`WandbSink`).

W&B gets every progress row (the scalars TensorBoard gets at that interval, the recent
return overall and per level, frames/s, seconds of training), with ``frames`` as the x-axis
of every chart, and the resolved config and the run's provenance as the W&B run's config.
Its files go under ``<logdir>/wandb``. A resumed gazelle run continues the same W&B run
(its id is kept in ``<logdir>/wandb-run-id``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gazelle.config import Config, ConfigError
from gazelle.console import make_console
from gazelle.logging import RowSink, RunLogger

__all__ = ["RUN_ID_FILE", "WandbSink", "open_run_logger"]

#: Where a run keeps the id of its W&B run, so that a resume continues it.
RUN_ID_FILE = "wandb-run-id"
#: Row fields W&B is not given: it keeps its own wall-clock timestamp.
SKIPPED_FIELDS = ("wall_time",)


def open_run_logger(
    config: Config, *, total_frames: int, resume_frames: int | None = None
) -> RunLogger:
    """The logger of a training run of `config`: its console (`--quiet`), TensorBoard,
    progress.jsonl and, with `--wandb`, a W&B run (started here: a failure to start one
    is a `ConfigError` before any actor starts)."""
    run = config.run
    sinks: list[RowSink] = []
    if run.wandb:
        sinks.append(WandbSink.start(config, resuming=resume_frames is not None))
    try:
        return RunLogger(
            run.folder(),
            total_frames=total_frames,
            resume_frames=resume_frames,
            console=make_console(quiet=run.quiet),
            sinks=sinks,
            max_seconds=run.max_seconds,
        )
    except BaseException:
        for sink in sinks:
            sink.close()
        raise


class WandbSink:
    """A W&B run that records each progress row (`RunLogger`'s `RowSink`)."""

    def __init__(self, run: Any) -> None:
        """`run`: a started `wandb` run."""
        self.run = run

    @classmethod
    def start(cls, config: Config, *, resuming: bool) -> WandbSink:
        """Start (or, when `resuming`, continue) the W&B run of `config`'s logdir."""
        import wandb

        from gazelle.provenance import provenance

        logdir = config.run.folder()
        mode: Any = config.run.wandb_mode  # why: one of wandb's modes (check_wandb) or None
        try:
            run = wandb.init(
                project=config.run.wandb_project,
                dir=str(logdir),
                mode=mode,
                id=_run_id(logdir, resuming),
                resume="allow",
                name=logdir.name,
                config={**config.to_dict(), "provenance": provenance()},
                # why: console="off": W&B wrapping stdout would record the live display's
                # redraws; quiet: no run summary printed under gazelle's own.
                settings=wandb.Settings(console="off", quiet=True),
            )
        except wandb.errors.Error as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ConfigError(
                "wandb_mode",
                config.run.wandb_mode,
                "offline (no network or login needed; wandb sync uploads it later), or "
                "online after wandb login",
                problem=f"W&B could not start a run ({reason})",
            ) from err
        # why: every chart against env frames, not W&B's own call counter, which a resumed
        # run (or an interval with nothing new) would shift.
        run.define_metric("frames")
        run.define_metric("*", step_metric="frames")
        return cls(run)

    def log_row(self, row: Mapping[str, Any]) -> None:
        """Log one progress row; null fields (no episode yet, NaN) are left out."""
        values = {k: v for k, v in row.items() if v is not None and k not in SKIPPED_FIELDS}
        self.run.log(values)

    def close(self) -> None:
        """Finish the W&B run (offline: its files are complete under the logdir)."""
        self.run.finish()


def _run_id(logdir: Path, resuming: bool) -> str:
    """The W&B run id of `logdir`: the saved one when resuming, else a new one (saved)."""
    logdir.mkdir(parents=True, exist_ok=True)
    path = logdir / RUN_ID_FILE
    if resuming and path.exists():
        saved = path.read_text().strip()
        if saved:
            return saved
    run_id = secrets.token_hex(4)
    path.write_text(run_id + "\n")
    return run_id
