"""IMPALA's loop: batches from the backend, one learner step each, new weights published,
telemetry logged, checkpoints written. No maths here (the loss is `impala.loss`) and no
transport (the backend's `Transport`)."""

from __future__ import annotations

import dataclasses
import functools
import queue
import time
from collections.abc import Callable
from typing import Any

import torch

from gazelle.algorithms import runlock
from gazelle.algorithms.impala import ranks
from gazelle.algorithms.impala.build import ImpalaRun, MakeLoss, build, vtrace_loss
from gazelle.algorithms.impala.passes import drop_stale, select_unrolls, train_on_batch
from gazelle.algorithms.impala.report import (
    console_extras,
    describe,
    inference_metrics,
    log_progress,
    report_nonfinite,
)
from gazelle.algorithms.preflight import check_wandb
from gazelle.algorithms.runstate import (
    CHECKPOINT_FILE,
    TrainResult,
    interruptible,
    restore,
    resume_schedule,
    save,
    write_config,
)
from gazelle.algorithms.stops import (
    NonFiniteError,
    final_save,
    stop_on_os_error,
    warn,
    warn_on_error,
)
from gazelle.algorithms.telemetry import Telemetry
from gazelle.config import Config
from gazelle.logging import RunLogger, Timings
from gazelle.runtime.batch_stats import BatchStats
from gazelle.runtime.layer_stats import StallWatch
from gazelle.runtime.learner import LossFn, Prefetcher
from gazelle.runtime.memory_check import MemoryCheck, readable
from gazelle.runtime.policy_health import DeadPolicyWatch, max_entropy
from gazelle.runtime.schedule import LinearDecay
from gazelle.runtime.unit_health import SaturationWatch
from gazelle.tracking import open_run_logger

__all__ = [
    "CHECKPOINT_FILE", "NonFiniteError", "TrainResult", "select_unrolls", "train",
    "train_on_batch",
]  # fmt: skip


def train(
    config: Config,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    *,
    loss_fn: LossFn | None = None,
    make_loss: MakeLoss = vtrace_loss,
) -> TrainResult:
    """Train IMPALA (or APPO) with `config`; resumes from its logdir's checkpoint if there
    is one.

    `on_progress` gets a dict at every log interval; `loss_fn` replaces the V-trace loss,
    `make_loss` makes the loss from the resolved config (see `build`)."""
    check_wandb(config)
    start = functools.partial(ranks.start, loss_fn=loss_fn, make_loss=make_loss)
    run = build(config, loss_fn, make_loss, start)
    cfg = run.config
    logdir = cfg.run.folder()
    ckpt_path = logdir / CHECKPOINT_FILE
    counters: dict[str, Any] = {"frames": 0, "updates": 0, "episodes": 0, "returns": {}}
    try:
        if cfg.run.resume and ckpt_path.exists():
            counters = restore(ckpt_path, cfg, run.agent, run.optimizer, run.device)
            print(
                f"gazelle: resumed from {counters['source']} at {counters['frames']:,} frames "
                f"({counters['updates']} updates)"
            )
    except BaseException:
        ranks.close_learners(run, timeout=1.0)
        raise
    logger = open_run_logger(
        cfg, total_frames=run.total_frames, resume_frames=counters["frames"] or None
    )
    logger.load_returns_state(counters["returns"])
    write_config(logdir, cfg)
    print(describe(run))
    timings = Timings()
    telemetry = Telemetry(logger, timings, run.levels, run.action_repeats)
    telemetry.episodes = counters["episodes"]
    transport = run.transport
    transport.params.publish(run.agent, counters["updates"])
    transport.fleet.start()
    # why: twice the loop's own limit, so that the loop's message (naming each actor's
    # state) is what a user sees, not the batch source's bare timeout.
    timeout = 2 * cfg.run.batch_timeout_s
    prefetcher = Prefetcher(
        lambda should_stop: transport.batches.batches(run.batch_size, timeout, should_stop),
        run.device,
    )
    fresh = LinearDecay.fresh(run.learning_rate, run.total_frames)
    schedule = resume_schedule(counters.get("lr_schedule"), counters["frames"], fresh)
    state = _LoopState(counters["frames"], counters["updates"], schedule)
    interrupted, reached_at = False, None
    try:
        with interruptible(), stop_on_os_error():
            if run.learners is not None:
                # why: after the restore (a resume with any --learners starts every learner
                # from the checkpoint, which only rank 0 reads and writes) and once the
                # actors start, so the learners build their agents while the actors do.
                with ranks.learner_faults(run):
                    ranks.send_start(run.learners.collective, run.agent, run.optimizer)
            reached_at = _loop(run, state, prefetcher, logger, timings, telemetry, on_progress)
    except KeyboardInterrupt:
        interrupted = True
        print("\ngazelle: interrupted; saving a checkpoint (re-run the same command to resume)")
    finally:
        if not prefetcher.close():
            print("gazelle: the learner's prefetch thread did not stop within 10 s", flush=True)
        ranks.close_learners(run)
        transport.fleet.close()
        # why: the events actors sent while the loop ended still carry finished episodes.
        telemetry.consume(transport.fleet.poll(), state.frames)
        final_save(
            ckpt_path,
            lambda: save(
                ckpt_path,
                cfg,
                run.agent,
                run.optimizer,
                state.frames,
                state.updates,
                telemetry.episodes,
                run.levels,
                logger.returns_state(),
                state.schedule,
            ),
        )
        fps = state.fps()
        # why: the last row is the one a reader takes the per-level counts and scores from.
        metrics = {**{k: float(v) for k, v in state.metrics.items()}, **telemetry.level_metrics()}
        warn_on_error(
            "the last progress row",
            lambda: logger.progress(state.frames, fps, {**metrics, **telemetry.scores()}),
        )
        logger.console_line(state.frames, fps, force=True, **console_extras(state, telemetry))
        warn_on_error("closing the logs", logger.close)
        runlock.release(logdir)  # why: last: the run's files are written and closed
    return TrainResult(
        frames=state.frames,
        updates=state.updates,
        episodes=telemetry.episodes,
        recent_return=logger.recent_return(),
        level_returns={level: logger.recent_return(level) for level in run.levels},
        fps=state.fps(),
        logdir=logdir,
        interrupted=interrupted,
        actor_restarts=sum(transport.fleet.restarts),
        dropped_unrolls=transport.fleet.dropped_slots + state.stale_unrolls,
        target_reached_at=reached_at,
    )


@dataclasses.dataclass
class _LoopState:
    frames: int
    updates: int
    schedule: LinearDecay
    stale_unrolls: int = 0
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    start_time: float = dataclasses.field(default_factory=time.monotonic)
    start_frames: int = 0

    def __post_init__(self) -> None:
        self.start_frames = self.frames

    def fps(self) -> float:
        return (self.frames - self.start_frames) / max(time.monotonic() - self.start_time, 1e-9)


def _loop(
    run: ImpalaRun,
    state: _LoopState,
    prefetcher: Prefetcher,
    logger: RunLogger,
    timings: Timings,
    telemetry: Telemetry,
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> int | None:
    """Returns the frame count at which `--target-return` was reached, or None."""
    cfg, transport = run.config, run.transport
    frames_per_unroll = run.unroll_length * run.action_repeats
    ckpt_path = cfg.run.folder() / CHECKPOINT_FILE
    stall = StallWatch(warn=warn)
    # why: the learner reports the last measured share on every update (`HEALTH_EVERY`).
    saturation = SaturationWatch(warn=warn, every=1)
    dead = DeadPolicyWatch(max_entropy(run.obs_spec.actions), warn=warn)
    # why: a memoryless agent on a task with hidden state learns nothing and says nothing;
    # the check says so (`gazelle.runtime.memory_check`).
    spec = getattr(run.agent, "obs_spec", run.obs_spec)  # why: without withheld fields
    memory = (
        MemoryCheck(spec, warn=warn, seed=cfg.run.seed)
        if not cfg.model.use_lstm and readable(spec)
        else None
    )
    memory_metrics: dict[str, float] = {}
    data = BatchStats(field.name for field in spec.fields)
    inference_seen = {"batches": 0.0, "rows": 0.0}
    deadline = state.start_time + (cfg.run.max_seconds or float("inf"))
    last_log = last_ckpt = time.monotonic()
    target = cfg.run.target_return
    while (
        state.frames < run.total_frames
        and time.monotonic() < deadline
        and not logger.reached(target)
    ):
        t0 = time.perf_counter()
        batch = _next_batch(prefetcher, run)
        t1 = time.perf_counter()
        timings.add("learner_wait", t1 - t0)
        lag = state.updates - batch["policy_version"]
        kept = drop_stale(batch, state.updates, cfg.algorithm.max_policy_lag)
        state.stale_unrolls += int(lag.numel()) - (
            0 if kept is None else int(kept["policy_version"].numel())
        )
        telemetry.consume(transport.fleet.poll(), state.frames)
        if kept is None:
            continue
        lr = state.schedule(state.frames)
        with ranks.learner_faults(run):
            metrics = train_on_batch(run, kept, lr)
        state.frames += frames_per_unroll * int(kept["policy_version"].numel())
        if metrics["learner/skipped"]:
            report_nonfinite(run, state.frames)
        else:
            state.updates += 1
            transport.params.publish(run.agent, state.updates)
        timings.add("learner", time.perf_counter() - t1)
        if memory is not None and memory.active:
            memory_metrics.update(memory.observe(kept))
        data.add(kept)
        stall.update(metrics, state.updates, lr_scale=lr / run.learning_rate)
        saturation.update(metrics, state.updates)
        state.metrics = {
            **metrics,
            "charts/learning_rate": lr,
            "charts/policy_lag": lag.float().mean(),
            "charts/policy_lag_max": lag.max(),
            "charts/stale_unrolls": state.stale_unrolls,
            "charts/actor_restarts": telemetry.restarts,
            "charts/skipped_updates": run.learner.skipped,
            "charts/env_errors": telemetry.env_errors,
            "charts/actors_hung": telemetry.hung,
            **inference_metrics(transport.fleet.stats(), inference_seen),
            **memory_metrics,
            **data.means(),
        }
        now = time.monotonic()
        if now - last_log >= cfg.run.log_interval_s:
            row = log_progress(run, state, logger, timings, telemetry, on_progress)
            dead.update(state.frames, row.get("policy/entropy"), logger.recent_return())
            data.reset()
            last_log = now
        if now - last_ckpt >= cfg.run.checkpoint_interval_s:
            save(
                ckpt_path,
                cfg,
                run.agent,
                run.optimizer,
                state.frames,
                state.updates,
                telemetry.episodes,
                run.levels,
                logger.returns_state(),
                state.schedule,
            )
            last_ckpt = now
    return state.frames if logger.reached(target) else None


def _next_batch(prefetcher: Prefetcher, run: ImpalaRun) -> dict[str, torch.Tensor]:
    """The next batch. Raises if a part the run needs died, or after `--batch-timeout-s`
    without one (naming each actor's state; a warning with it comes at a quarter)."""
    timeout = run.config.run.batch_timeout_s
    start = time.monotonic()
    warned = False
    while True:
        # why: short waits, so a dead inference server (no more unrolls) fails the run
        # with its own error instead of a learner timeout much later.
        run.transport.fleet.check()
        if run.learners is not None:
            run.learners.check()
        if time.monotonic() - start > 1.0:
            # why: actors are otherwise replaced after a batch only; without this a run
            # whose every actor died before the first batch would wait for nothing.
            run.transport.fleet.supervise()
        try:
            return prefetcher.get(timeout=max(0.01, min(1.0, timeout)))
        except queue.Empty:
            waited = time.monotonic() - start
            if waited >= timeout:
                raise TimeoutError(
                    f"the learner got no batch for {waited:.0f} s (--batch-timeout-s); "
                    f"actors:\n{run.transport.fleet.describe()}"
                ) from None
            if not warned and waited >= timeout / 4:
                warned = True
                print(
                    f"\ngazelle: warning: no batch for {waited:.0f} s; actors:\n"
                    f"{run.transport.fleet.describe()}"
                )
