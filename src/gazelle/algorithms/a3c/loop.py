"""A3C: the global network and its shared Adam (`shared_adam.SharedAdamServer`, Hogwild),
handed with the workers' work (`worker.run_worker`) to the backend `--backend` names
(`gazelle.backends.build_workers`: local processes and the store in shared memory, or Ray
actors and the store in a parameter-server actor), and the main process's loop, which only
watches: it logs the workers' episodes and update summaries, counts frames, writes
checkpoints and replaces dead or hung workers. The same logs, checkpoints, resume and test
mode as IMPALA (`gazelle.algorithms.runstate`, `telemetry`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from gazelle.algorithms import runlock
from gazelle.algorithms.a3c.report import UpdateWatch, describe, log_progress
from gazelle.algorithms.a3c.shared_adam import SharedAdamServer
from gazelle.algorithms.a3c.worker import TrainerSettings, run_worker, trainer_settings
from gazelle.algorithms.common import env_kwargs, prepare
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
    final_save,
    stop_on_failure,
    stop_on_os_error,
    warn_on_error,
)
from gazelle.algorithms.telemetry import Telemetry
from gazelle.backends import WorkerRequest, build_workers
from gazelle.config import Config, ConfigError
from gazelle.errors import RunError
from gazelle.logging import RunLogger, Timings
from gazelle.models import Agent, build_agent
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.interfaces import Fleet, ParameterServer
from gazelle.runtime.schedule import LinearDecay
from gazelle.tracking import open_run_logger
from gazelle.types import ObsSpec

if TYPE_CHECKING:
    from gazelle.envs.probe import EnvProbe

#: Seconds between two looks at the workers' events.
POLL_S = 0.05
#: Seconds between two `Fleet.check()` calls (on Ray, one call to the parameter server).
CHECK_S = 1.0


def a3c_agent(config: Config, obs_spec: ObsSpec) -> Agent:
    """The global network of a resolved A3C config (its torso, core, `--init` and the
    core's inputs, `--last-action-reward`)."""
    model = config.model
    assert model.init is not None
    return build_agent(obs_spec, model.torso, bool(model.use_lstm), model.init,
                       bool(config.a3c.last_action_reward),
                       **model.agent_options())  # fmt: skip


def worker_specs(config: Config, found: EnvProbe) -> list[ActorSpec]:
    """One spec per worker (`--num-actors`), levels dealt round-robin."""
    actors = config.actors
    assert actors.num_actors and actors.envs_per_actor
    return [
        ActorSpec(
            actor_id=i,
            level=found.levels[i % len(found.levels)],
            level_id=i % len(found.levels),
            envs_per_actor=actors.envs_per_actor,
            unroll_length=config.a3c.unroll_length,
            obs_spec=found.obs_spec,
            torso=config.model.torso,
            use_lstm=bool(config.model.use_lstm),
            seed=config.run.seed * 1_000_003 + 1000 * i,
            env_kwargs=env_kwargs(config),
            last_action_reward=bool(config.a3c.last_action_reward),
            agent_options=config.model.agent_options(),
            action_bounds=config.model.action_bounds,
            env_target=found.target(found.levels[i % len(found.levels)]),
        )
        for i in range(actors.num_actors)
    ]


def train(
    config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None
) -> TrainResult:
    """Train A3C with `config`; resumes from its logdir's checkpoint if there is one.

    Raises `RunStopped` (one line; a final checkpoint written first, or a line saying why
    not) when the workers' fleet or the parameter server fails, after
    `--max-nonfinite-updates` skipped pushes in a row, or on a full disk."""
    if config.algo != "a3c":
        raise ConfigError("algo", config.algo, "a3c (this is A3C's loop)")
    check_wandb(config)
    config, found, device = prepare(config)
    a3c, model = config.a3c, config.model
    assert a3c.learning_rate is not None and model.use_lstm is not None
    agent = a3c_agent(config, found.obs_spec)
    specs = worker_specs(config, found)
    total = int(config.run.total_frames or 0)
    schedule = LinearDecay.fresh(a3c.learning_rate, total) if a3c.learning_rate_decay else None
    settings = trainer_settings(config, found.action_repeats)
    server, fleet = _workers(config, agent, specs, settings, schedule)
    logdir = config.run.folder()
    ckpt_path = logdir / CHECKPOINT_FILE
    episodes, returns = 0, {}
    if config.run.resume and ckpt_path.exists():
        counters = restore(ckpt_path, config, agent, server, device)
        returns = counters["returns"]
        server.load_weights(agent)
        episodes = counters["episodes"]
        print(f"gazelle: resumed from {counters['source']} at {server.frame_count:,} frames")
        if schedule is not None:
            schedule = resume_schedule(counters["lr_schedule"], server.frame_count, schedule)
            # why: before `fleet.start()`: each worker is handed the server when it starts.
            server.set_schedule(schedule)
    logger = open_run_logger(config, total_frames=total, resume_frames=server.frame_count or None)
    logger.load_returns_state(returns)
    write_config(logdir, config)
    print(describe(config, len(specs)))
    timings = Timings()
    telemetry = Telemetry(logger, timings, found.levels, found.action_repeats)
    telemetry.episodes = episodes
    run = _Run(config, agent, server, fleet, logger, telemetry, timings, found.levels, schedule)
    watch = UpdateWatch(config, schedule, found.obs_spec.actions)
    interrupted, reached_at = False, None
    fleet.start()
    try:
        with interruptible(), stop_on_os_error():
            reached_at = _loop(run, watch, on_progress)
    except KeyboardInterrupt:
        interrupted = True
        print("\ngazelle: interrupted; saving a checkpoint (re-run the same command to resume)")
    finally:
        # why: each step warns in one line instead of raising over the error that may be on
        # its way out (a dead server, a full disk).
        warn_on_error("stopping the workers", fleet.close)
        warn_on_error("reading the workers' last events", lambda: telemetry.consume(
            [e for e in fleet.poll() if e.get("type") != "update"], run.frames))  # fmt: skip
        # why: `run.save` says it, once; a backend's own RunError (Ray's parameter server
        # gone silent) too: a finally that raised would skip the final checkpoint's line
        with contextlib.suppress(RunError):
            run.read_counts()
        final_save(ckpt_path, run.save)
        if hasattr(fleet, "shutdown"):
            warn_on_error("shutting the workers' backend down", fleet.shutdown)
        fps = run.fps()
        # why: the last row is the one a reader takes the per-level counts and scores from.
        warn_on_error(
            "the last progress row",
            lambda: logger.progress(
                run.frames, fps, {**telemetry.scores(), **telemetry.level_metrics()}
            ),
        )
        logger.console_line(run.frames, fps, force=True, actor_restarts=telemetry.restarts)
        warn_on_error("closing the logs", logger.close)
        runlock.release(logdir)  # why: last: the run's files are written and closed
    return TrainResult(
        frames=run.frames,
        updates=run.steps,
        episodes=telemetry.episodes,
        recent_return=logger.recent_return(),
        level_returns={level: logger.recent_return(level) for level in found.levels},
        fps=run.fps(),
        logdir=logdir,
        interrupted=interrupted,
        actor_restarts=sum(fleet.restarts),
        target_reached_at=reached_at,
    )


@dataclasses.dataclass
class _Run:
    """What the loop watches, and the server's counts as last read (what a checkpoint says
    once the server cannot be read any more)."""

    config: Config
    agent: Agent
    server: ParameterServer
    fleet: Fleet
    logger: RunLogger
    telemetry: Telemetry
    timings: Timings
    levels: list[str]
    schedule: LinearDecay | None
    frames: int = 0
    steps: int = 0
    start_time: float = dataclasses.field(default_factory=time.monotonic)
    start_frames: int = 0

    def __post_init__(self) -> None:
        self.read_counts()
        self.start_frames = self.frames

    def read_counts(self) -> None:
        with stop_on_failure("the A3C parameter server"):
            self.frames, self.steps = self.server.frame_count, self.server.step_count

    def fps(self) -> float:
        return (self.frames - self.start_frames) / max(time.monotonic() - self.start_time, 1e-9)

    def save(self) -> None:
        """A checkpoint of the global weights and Adam's state, as the server has them."""
        # why: every read of the server first (on Ray each is a call that fails once it is
        # dead), so that only the write itself can fail in `save` (a full disk: its own
        # message).
        with stop_on_failure("the A3C parameter server"):
            self.server.pull(self.agent)  # why: on Ray the global weights live elsewhere
            frames, steps = self.server.frame_count, self.server.step_count
            adam = _Snapshot(self.server.state_dict())
        ckpt = self.config.run.folder() / CHECKPOINT_FILE
        save(ckpt, self.config, self.agent, adam, frames, steps, self.telemetry.episodes,
             self.levels, self.logger.returns_state(), self.schedule)  # fmt: skip


class _Snapshot:
    """The server's optimiser state, read once, for `save`."""

    def __init__(self, state: dict[str, object]) -> None:
        self.state = state

    def state_dict(self) -> dict[str, object]:
        return self.state

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.state = state


def _loop(
    run: _Run, watch: UpdateWatch, on_progress: Callable[[dict[str, Any]], None] | None
) -> int | None:
    """Until the budget, `--max-seconds` or `--target-return`: the workers' events to the
    logs, the fleet supervised and checked, periodic checkpoints. Returns the frame count at
    which the target return was reached, or None."""
    config, fleet = run.config, run.fleet
    total = int(config.run.total_frames or 0)
    deadline = run.start_time + (config.run.max_seconds or float("inf"))
    last_log = last_ckpt = last_check = time.monotonic()
    target = config.run.target_return
    while run.frames < total and time.monotonic() < deadline and not run.logger.reached(target):
        time.sleep(POLL_S)
        now = time.monotonic()
        # why: poll replaces dead and hung (silent for --actor-timeout-s) workers; check
        # raises if a part the run cannot go on without (the parameter server) died. Any
        # failure of either ends the run in one line, with a final checkpoint.
        with stop_on_failure("the A3C workers' fleet"):
            events = fleet.poll()
            if now - last_check >= CHECK_S:
                fleet.check()
                last_check = now
        run.read_counts()
        watch.consume([e for e in events if e.get("type") == "update"], run.frames, run.steps)
        run.telemetry.consume([e for e in events if e.get("type") != "update"], run.frames)
        if now - last_log >= config.run.log_interval_s:
            row = log_progress(run.logger, run.frames, run.steps, watch.take(), run.telemetry,
                               run.timings, run.fps(), on_progress)  # fmt: skip
            watch.dead.update(run.frames, row.get("policy/entropy"), run.logger.recent_return())
            last_log = now
        if now - last_ckpt >= config.run.checkpoint_interval_s:
            run.save()
            last_ckpt = now
    return run.frames if run.logger.reached(target) else None


def shared_adam(
    config: Config, num_workers: int, schedule: LinearDecay | None = None
) -> Callable[[nn.Module], SharedAdamServer]:
    """`make_server(agent)`: the shared Adam over `agent` of a resolved config (its learning
    rate, epsilon and `--lstm-lr-scale`), with `schedule` (None: a constant rate)."""
    a3c = config.a3c
    assert a3c.learning_rate is not None and a3c.lstm_lr_scale is not None
    return functools.partial(
        SharedAdamServer, num_workers=num_workers, lr=a3c.learning_rate, eps=a3c.epsilon,
        schedule=schedule, lstm_lr_scale=a3c.lstm_lr_scale,
    )  # fmt: skip


def _workers(
    config: Config,
    agent: Agent,
    specs: list[ActorSpec],
    settings: TrainerSettings,
    schedule: LinearDecay | None,
) -> tuple[ParameterServer, Fleet]:
    """The parameter store and the (not yet started) workers on `--backend`: each backend is
    handed the work its workers run (`run_worker(spec, context, server, settings)`) and the
    store they push to (the shared Adam over the global network), and keeps the store where
    its workers reach it (`gazelle.backends.WorkerRequest`)."""
    actors = config.actors
    request = WorkerRequest(
        work=run_worker,
        specs=specs,
        settings=settings,
        agent=agent,
        make_server=shared_adam(config, len(specs), schedule),
        actor_timeout_s=actors.actor_timeout_s,
        cluster_address=actors.ray_address,
        cpus_per_actor=actors.ray_actor_cpus,
        dashboard=actors.ray_dashboard,
        allow_tokenless=actors.ray_allow_tokenless,
    )
    workers = build_workers(actors.backend, request)
    return workers.server, workers.fleet
