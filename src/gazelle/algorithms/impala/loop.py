"""IMPALA on one machine: wiring of actors, buffers, learner, logs and checkpoints.

No maths here: the loss lives in `gazelle.losses`, the update in `gazelle.runtime.learner`.
"""

from __future__ import annotations

import dataclasses
import queue
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gazelle import checkpoint
from gazelle.algorithms.setup import RunSetup, prepare
from gazelle.logging import RunLogger, Timings
from gazelle.optim import polynomial_decay
from gazelle.runtime.buffers import ACTOR_STAGES, is_per_unroll
from gazelle.runtime.learner import Prefetcher

CHECKPOINT_FILE = "checkpoint.pt"
BATCH_TIMEOUT_S = 600.0


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


class _Terminate(Exception):
    """SIGTERM or SIGINT as an exception, so `finally` saves the checkpoint."""


def _episodes(batch: dict[str, torch.Tensor]) -> tuple[np.ndarray, ...]:
    """Games that ended in this batch: (level ids, returns, lengths).

    why: index 0 of an unroll repeats the previous unroll's last step, so only 1..T count.
    """
    ended = batch["game_over"][1:].cpu().numpy()
    levels = np.broadcast_to(batch["level_id"].cpu().numpy(), ended.shape)[ended]
    returns = batch["episode_return"][1:].cpu().numpy()[ended]
    lengths = batch["episode_length"][1:].cpu().numpy()[ended]
    return levels, returns, lengths


def _drop_stale(batch: dict[str, torch.Tensor], version: int, max_lag: int | None) -> Any:
    """Drop unrolls whose policy is more than `max_lag` updates old (None keeps all)."""
    if max_lag is None:
        return batch
    keep = (version - batch["policy_version"]) <= max_lag
    if bool(keep.all()):
        return batch
    if not bool(keep.any()):
        return None
    index = keep.nonzero().squeeze(1)
    out = {}
    for name, value in batch.items():
        # why: time-major fields keep B in dim 1; per-unroll fields (state, meta) in dim 0.
        dim = 0 if is_per_unroll(name) else 1
        out[name] = value.index_select(dim, index.to(value.device))
    return out


def train(config: Any, on_progress: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Train IMPALA with `config` (an `ImpalaConfig`); resumes from its logdir if possible."""
    run = prepare(config)
    cfg = run.config
    logdir = Path(cfg.logdir)
    ckpt_path = logdir / CHECKPOINT_FILE
    frames, updates, episodes = 0, 0, 0
    if cfg.resume and ckpt_path.exists():
        state = checkpoint.load(ckpt_path, map_location=run.device)
        frames, updates, episodes = _restore(run, state)
        print(f"gazelle: resumed from {ckpt_path} at {frames:,} frames ({updates} updates)")
    logger = RunLogger(
        logdir, total_frames=run.total_frames, resume_frames=frames if frames else None
    )
    _write_config(logdir, cfg)
    frames_per_batch = run.batch_size * run.unroll_length * run.action_repeats
    previous_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(signum: int, frame: Any) -> None:
        raise _Terminate

    # why: SIGINT too, because a run started in the background by a non-interactive shell
    # (nohup, `cmd &` in a script) inherits SIGINT as ignored, and `kill -INT` would do nothing.
    for sig in previous_handlers:
        signal.signal(sig, on_signal)
    run.params.publish(run.agent, updates)
    run.actors.start()
    prefetcher = Prefetcher(
        lambda should_stop: run.buffers.batches(run.batch_size, BATCH_TIMEOUT_S, should_stop),
        run.device,
    )
    timings = Timings()
    interrupted = False
    start_time, start_frames = time.monotonic(), frames
    last_log = last_ckpt = time.monotonic()
    fps = 0.0
    recent_metrics: dict[str, Any] = {}
    inference_seen = {"batches": 0.0, "rows": 0.0}
    try:
        deadline = start_time + (cfg.max_seconds or float("inf"))
        while frames < run.total_frames and time.monotonic() < deadline:
            t0 = time.perf_counter()
            batch = _next_batch(prefetcher, run)
            t1 = time.perf_counter()
            timings.add("learner_wait", t1 - t0)
            lag = updates - batch["policy_version"]
            batch = _drop_stale(batch, updates, cfg.max_policy_lag)
            if batch is None:
                continue
            lr = polynomial_decay(run.learning_rate, frames, run.total_frames)
            metrics = run.learner.step(batch, lr)
            updates += 1
            frames += frames_per_batch
            run.params.publish(run.agent, updates)
            timings.add("learner", time.perf_counter() - t1)
            levels, returns, lengths = _episodes(batch)
            for level_id, ret, length in zip(levels, returns, lengths):
                logger.episode(
                    run.levels[level_id], float(ret), int(length) * run.action_repeats, frames
                )
            episodes += len(returns)
            actor_timing = batch["actor_timing"].mean(0)
            for stage, seconds in zip(ACTOR_STAGES, actor_timing.tolist()):
                timings.add(f"actor_{stage}_per_step", seconds)
            recent_metrics = {
                **metrics,
                "charts/learning_rate": lr,
                "charts/policy_lag": lag.float().mean(),
                "charts/policy_lag_max": lag.max(),
            }
            for event in run.actors.poll():
                _log_event(event)
            recent_metrics.update(_inference_metrics(run, inference_seen))
            now = time.monotonic()
            if now - last_log >= cfg.log_interval_s:
                fps = (frames - start_frames) / max(now - start_time, 1e-9)
                scalars = _log(logger, run, recent_metrics, timings, frames, fps, batch)
                if on_progress is not None:
                    on_progress(
                        {
                            "frames": frames,
                            "fps": fps,
                            "time": now,
                            "updates": updates,
                            "episode_return": logger.recent_return(),
                            **{k: v for k, v in scalars.items() if k.startswith("timing/")},
                        }
                    )
                last_log = now
            if now - last_ckpt >= cfg.checkpoint_interval_s:
                _save(run, ckpt_path, frames, updates, episodes)
                last_ckpt = now
    except (KeyboardInterrupt, _Terminate):
        interrupted = True
        print("\ngazelle: interrupted; saving a checkpoint (re-run the same command to resume)")
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        prefetcher.close()
        run.actors.close()
        _save(run, ckpt_path, frames, updates, episodes)
        fps = (frames - start_frames) / max(time.monotonic() - start_time, 1e-9)
        logger.progress(frames, fps, _floats(recent_metrics))
        logger.console_line(frames, fps, force=True)
        logger.close()
    levels_recent = {level: logger.recent_return(level) for level in run.levels}
    return TrainResult(
        frames,
        updates,
        episodes,
        logger.recent_return(),
        levels_recent,
        fps,
        logdir,
        interrupted,
        sum(run.actors.restarts),
        run.actors.dropped_slots,
    )


def _next_batch(prefetcher: Prefetcher, run: RunSetup) -> dict[str, torch.Tensor]:
    """The next batch; raises if the inference server died or after BATCH_TIMEOUT_S."""
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while True:
        # why: short waits, so a dead inference server (no more unrolls) fails the run
        # with its own error instead of a learner timeout ten minutes later.
        run.actors.check_server()
        try:
            return prefetcher.get(timeout=max(0.01, min(1.0, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() >= deadline:
                raise


def _inference_metrics(run: RunSetup, seen: dict[str, float]) -> dict[str, float]:
    """Mean envs per central inference batch since the last call (`seen` is updated)."""
    stats = run.actors.inference_stats()
    batches = stats.get("batches", 0.0) - seen["batches"]
    if batches <= 0:
        return {}
    mean = (stats["rows"] - seen["rows"]) / batches
    seen.update(batches=stats["batches"], rows=stats["rows"])
    return {"charts/inference_batch": mean}


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def _log(
    logger: RunLogger,
    run: RunSetup,
    metrics: dict[str, Any],
    timings: Timings,
    frames: int,
    fps: float,
    batch: dict[str, torch.Tensor],
) -> dict[str, Any]:
    scalars = {**_floats(metrics), "charts/fps": fps, **timings.means()}
    scalars.update(run.scores(logger))
    logger.scalars(scalars, frames)
    logger.histogram("charts/action", batch["action"][1:], frames)
    logger.progress(frames, fps, scalars)
    logger.console_line(frames, fps)
    timings.reset()
    return scalars


def _log_event(event: dict[str, Any]) -> None:
    kind = event.get("type")
    if kind == "actor_restart":
        print(
            f"\ngazelle: actor {event['actor']} died (exit code {event['exitcode']}); "
            f"restarted, {event['dropped_slots']} half-written unroll(s) dropped"
        )
    elif kind == "actor_crash":
        print(f"\ngazelle: actor {event['actor']} crashed:\n{event['message']}")
    elif kind == "env_error":
        print(
            f"\ngazelle: actor {event['actor']} env {event['env']} raised and was reset: "
            f"{event['message']}"
        )


def _save(run: RunSetup, path: Path, frames: int, updates: int, episodes: int) -> None:
    checkpoint.save(
        path,
        {
            "agent": run.agent.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "frames": frames,
            "updates": updates,
            "episodes": episodes,
            "rng": checkpoint.rng_state(),
            "config": run.config.to_dict(),
            "levels": list(run.levels),
        },
    )


def _restore(run: RunSetup, state: dict[str, Any]) -> tuple[int, int, int]:
    saved = state.get("config", {})
    for key in ("env", "model", "use_lstm"):
        if key in saved and saved[key] != getattr(run.config, key):
            raise ValueError(
                f"--{key.replace('_', '-')}: the checkpoint in {run.config.logdir} was trained "
                f"with {saved[key]!r}, not {getattr(run.config, key)!r}; use another --logdir "
                "or pass --no-resume"
            )
    run.agent.load_state_dict(state["agent"])
    run.optimizer.load_state_dict(state["optimizer"])
    checkpoint.set_rng_state(state["rng"])
    return int(state["frames"]), int(state["updates"]), int(state.get("episodes", 0))


def _write_config(logdir: Path, cfg: Any) -> None:
    import json

    (logdir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
