"""What every algorithm's loop shares around its run: the result, checkpoints written and
restored exactly, the config saved next to them, and signals turned into a clean stop."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import torch

from gazelle import checkpoint
from gazelle.config import Config
from gazelle.config.validation import TORSO_ACTIVATIONS
from gazelle.optim import regroup_state
from gazelle.runtime.schedule import LinearDecay

CHECKPOINT_FILE = "checkpoint.pt"
CONFIG_FILE = "config.json"


@dataclasses.dataclass
class TrainResult:
    """What a finished (or interrupted) run reached."""

    frames: int
    updates: int
    episodes: int
    recent_return: float | None
    level_returns: dict[str, float | None]
    fps: float
    logdir: Path
    interrupted: bool = False
    actor_restarts: int = 0
    dropped_unrolls: int = 0
    #: the frame count at which `--target-return` was reached (the loop's stop); None when it
    #: was not. `recent_return` may be lower: episodes that end while the run stops count too.
    target_reached_at: int | None = None


class StateHolder(Protocol):
    """An optimiser, or anything else whose state a checkpoint keeps (A3C's shared Adam)."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT raise KeyboardInterrupt inside, so a `finally` saves the
    checkpoint; the previous handlers come back on exit. Outside the main thread (a run
    in a Ray Tune trial's thread, `gazelle.tune`) it installs nothing: Python runs signal
    handlers in the main thread only, and refuses to install one from another."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # why: SIGINT too, because a run started in the background by a non-interactive shell
    # (nohup, `cmd &` in a script) inherits SIGINT as ignored, and `kill -INT` would do nothing.
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def save(
    path: Path,
    config: Config,
    agent: torch.nn.Module,
    optimizer: StateHolder,
    frames: int,
    updates: int,
    episodes: int,
    levels: list[str],
    returns: dict[str, list[float]] | None = None,
    lr_schedule: LinearDecay | None = None,
) -> None:
    """An atomic checkpoint with everything an exact resume needs; never one of non-finite
    weights (the previous checkpoint stays, and a line says so). `returns`: the logger's
    recent-return windows (`RunLogger.returns_state`); `lr_schedule`: the decay the run
    follows (None: a constant rate)."""
    if not all(bool(torch.isfinite(p).all()) for p in agent.parameters()):
        print(f"gazelle: the weights are not finite; {path} keeps the last good checkpoint")
        return
    checkpoint.save(
        path,
        {
            "agent": agent.state_dict(),
            "optimizer": optimizer.state_dict(),
            "frames": frames,
            "updates": updates,
            "episodes": episodes,
            "rng": checkpoint.rng_state(),
            "config": config.to_dict(),
            "levels": list(levels),
            "returns": dict(returns or {}),
            "lr_schedule": None if lr_schedule is None else lr_schedule.to_dict(),
        },
    )


def restore(
    path: Path,
    config: Config,
    agent: torch.nn.Module,
    optimizer: StateHolder,
    device: torch.device,
) -> dict[str, Any]:
    """Load a checkpoint into `agent` and `optimizer` (and the RNGs); returns its counters
    (`frames`, `updates`, `episodes`), the logger's recent-return windows (`returns`), the
    learning-rate decay it was saved with (`lr_schedule`, a `LinearDecay` or None) and the
    file it loaded (`source`).

    Raises ValueError naming the flag when the checkpoint was trained with another env,
    torso, core or algorithm (a checkpoint of gazelle 0.1, saved before the config had
    sections, is read too). An unreadable `path` (corrupt, truncated) falls back to the
    previous checkpoint beside it (`<path>.prev`) with a one-line warning, and is kept as
    `<path>.corrupt`; when neither loads, `CheckpointError` names both.
    """
    state, source, why = checkpoint.load_or_previous(path, map_location=device)
    if why is not None:
        try:
            kept = f"; the unreadable file is kept as {checkpoint.put_previous_back(path)}"
        except OSError as err:
            kept = f" (it could not be replaced: {err})"
        print(f"gazelle: warning: {why}; resuming from {source}, the one saved before it{kept}")
    saved = saved_config(state.get("config") or {})
    for name in ("algo", "env", "model", "use_lstm", "activation", "subtract_background"):
        was, now = _network_value(saved, name), _network_value(config, name)
        if was != now:
            raise ValueError(
                f"--{name.replace('_', '-')}: the checkpoint in {config.run.logdir} was trained "
                f"with {was!r}, not {now!r}; use another --logdir or pass --no-resume"
            )
    agent.load_state_dict(state["agent"])
    optimizer.load_state_dict(regroup_optimizer_state(state["optimizer"], optimizer, agent))
    checkpoint.set_rng_state(state["rng"])
    return {
        "frames": int(state["frames"]),
        "updates": int(state["updates"]),
        "episodes": int(state.get("episodes", 0)),
        "returns": {str(k): [float(r) for r in v] for k, v in state.get("returns", {}).items()},
        "lr_schedule": _saved_schedule(state, saved),
        "source": str(source),
    }


def resume_schedule(saved: LinearDecay | None, frames: int, fresh: LinearDecay) -> LinearDecay:
    """The learning-rate decay a run resumed at `frames` follows (`LinearDecay.resumed`):
    its checkpoint's (`saved`), continued without a step where the command's budget or rate
    differs (`fresh`: what the command asks for from frame 0), and a line that says so."""
    if saved is None:
        return fresh
    schedule = saved.resumed(frames, fresh)
    if schedule == saved:
        return schedule
    if fresh.base_lr != saved.base_lr:
        why = f"--learning-rate {fresh.base_lr:g} (the run was saved with {saved.base_lr:g})"
    else:
        why = f"--total-frames {fresh.end_frames:,} (the run was saved with {saved.end_frames:,})"
    if schedule is fresh:
        how = f"its rate had reached 0, so it takes the new budget's line: {fresh(frames):.3g}"
    else:
        how = f"the learning rate goes on from {schedule.lr:.3g}"
    print(f"gazelle: {why}: {how} at {frames:,} frames, down to 0 at {schedule.end_frames:,}")
    return schedule


def _saved_schedule(state: dict[str, Any], saved: Config) -> LinearDecay | None:
    """The checkpoint's decay; for one saved before checkpoints held it, its config's
    (`--learning-rate` at frame 0 down to 0 at `--total-frames`, where the algorithm decays)."""
    if "lr_schedule" in state:
        kept = state["lr_schedule"]
        return None if kept is None else LinearDecay.from_dict(kept)
    lr, total = saved.algorithm.learning_rate, saved.run.total_frames
    # why: an algorithm whose section has `learning_rate_decay` (A3C) decays only with it on.
    decays = bool(getattr(saved.algorithm, "learning_rate_decay", True))
    return LinearDecay.fresh(float(lr), int(total)) if decays and lr and total else None


def saved_config(data: dict[str, Any]) -> Config:
    """The config a run saved (its `config.json`, or its checkpoint's), with what it left
    unset because the field came later read as what that run did: no background subtracted
    (`--subtract-background`), no norm before the core (`--core-input-norm`). Raises what
    `Config.from_dict` raises."""
    saved = Config.from_dict(data)
    if saved.model.subtract_background is None:
        # why: a saved config is resolved, so unset means saved before the flag existed;
        # a newer preset must not change the frames its weights were trained on.
        saved = saved.replace(subtract_background=False)
    if saved.model.core_input_norm is None:
        # why: its agent has no norm before the core; a newer preset must not add one
        saved = saved.replace(core_input_norm=False)
    algorithm = saved.algorithm
    if getattr(algorithm, "lstm_lr_scale", 0.0) is None:
        # why: a run saved before the field stepped every layer at the one rate
        saved = saved.replace(lstm_lr_scale=1.0)
    if saved.env.doom_actions is None and not saved.env.raw_obs and _is_doom(saved.env.id):
        saved = saved.replace(doom_actions="single")  # why: ViZDoom's only form until then
    return saved


def _is_doom(spec: str) -> bool:
    """Whether every level of `spec` is a ViZDoom id (False where one cannot be resolved,
    and where resolving would import a module: a saved config imports nothing unasked,
    `gazelle.algorithms.imports`)."""
    from gazelle.envs.registry import expand_levels, imports_of, resolve

    try:
        if imports_of(spec):
            return False  # why: ViZDoom's ids need no module of the user's
        return all(resolve(level).kind == "vizdoom" for level in expand_levels(spec))
    except (ValueError, KeyError, ImportError):
        return False


def write_config(logdir: Path, config: Config) -> None:
    """The resolved config, nested by section, as `<logdir>/config.json`, and where the run
    came from (versions, git commit) as `provenance.json`."""
    from gazelle.provenance import write_provenance

    # why: a resume reads it back (the CLI's `saved_run`): never a torn one
    checkpoint.write_text(logdir / CONFIG_FILE, json.dumps(config.to_dict(), indent=2) + "\n")
    write_provenance(logdir)


def regroup_optimizer_state(state: Any, optimizer: StateHolder, agent: torch.nn.Module) -> Any:
    """`state` laid out as `optimizer`'s parameter groups (`gazelle.optim.regroup_state`:
    a checkpoint saved before the LSTM's own group); A3C's shared Adam takes it as it is."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return regroup_state(state, optimizer, agent)
    return state


def _network_value(config: Config, name: str) -> Any:
    """`config`'s `name`, with an unset activation read as what the torso then runs (its
    own): a checkpoint saved before `--activation` existed has none."""
    value = config.get(name)
    if name == "activation" and value is None:
        return TORSO_ACTIVATIONS.get(config.model.torso)
    return value
