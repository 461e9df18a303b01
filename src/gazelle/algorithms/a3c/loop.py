"""A3C: the global network and its Adam (one machine: `SharedAdamServer`, Hogwild; Ray: a
parameter-server actor), the workers (local processes supervised by a `TaskFleet`, or Ray
actors: `gazelle.backends.ray.a3c`), and the main process's loop,
which only watches: it logs the workers' episodes and update summaries, counts frames,
writes checkpoints and replaces dead or hung workers. The same logs, checkpoints, resume and
test mode as IMPALA (`gazelle.algorithms.runstate`, `telemetry`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gazelle.algorithms.a3c.loss import A3CLossSettings
from gazelle.algorithms.a3c.worker import TrainerSettings, run_worker
from gazelle.algorithms.common import env_kwargs, prepare
from gazelle.algorithms.preflight import check_wandb
from gazelle.algorithms.runstate import (
    CHECKPOINT_FILE,
    TrainResult,
    interruptible,
    restore,
    save,
    write_config,
)
from gazelle.algorithms.telemetry import Telemetry
from gazelle.backends.local.hogwild import SharedAdamServer
from gazelle.backends.local.process import TaskFleet
from gazelle.config import Config, ConfigError
from gazelle.logging import RunLogger, Timings
from gazelle.models import Agent, build_agent
from gazelle.runtime.actor import ActorSpec
from gazelle.runtime.interfaces import Fleet, ParameterServer
from gazelle.tracking import open_run_logger

if TYPE_CHECKING:
    from gazelle.envs.probe import EnvProbe

#: Seconds between two looks at the workers' events.
POLL_S = 0.05


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
        )
        for i in range(actors.num_actors)
    ]


def train(
    config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None
) -> TrainResult:
    """Train A3C with `config`; resumes from its logdir's checkpoint if there is one."""
    if config.algo != "a3c":
        raise ConfigError("algo", config.algo, "a3c (this is A3C's loop)")
    check_wandb(config)
    config, found, device = prepare(config)
    a3c, model = config.a3c, config.model
    assert a3c.learning_rate is not None and model.use_lstm is not None
    agent = build_agent(found.obs_spec, model.torso, model.use_lstm, model.init)
    specs = worker_specs(config, found)
    decay_frames = int(config.run.total_frames or 0) if a3c.learning_rate_decay else None
    settings = TrainerSettings(
        loss=A3CLossSettings(
            a3c.discounting, a3c.gae_lambda, a3c.entropy_cost, a3c.baseline_cost,
            a3c.reward_clipping,
        ),
        grad_norm_clip=a3c.grad_norm_clip,
        queue_size=a3c.queue_size,
        action_repeats=found.action_repeats,
    )  # fmt: skip
    server, fleet = _workers(config, agent, specs, settings, decay_frames)
    logdir = Path(config.run.logdir)
    ckpt_path = logdir / CHECKPOINT_FILE
    episodes, returns = 0, {}
    if config.run.resume and ckpt_path.exists():
        counters = restore(ckpt_path, config, agent, server, device)
        returns = counters["returns"]
        server.load_weights(agent)
        episodes = counters["episodes"]
        print(f"gazelle: resumed from {ckpt_path} at {server.frame_count:,} frames")
    total = int(config.run.total_frames or 0)
    logger = open_run_logger(config, total_frames=total, resume_frames=server.frame_count or None)
    logger.load_returns_state(returns)
    write_config(logdir, config)
    print(_describe(config, len(specs)))
    timings = Timings()
    telemetry = Telemetry(logger, timings, found.levels, found.action_repeats)
    telemetry.episodes = episodes
    updates: list[dict[str, Any]] = []
    start, start_frames = time.monotonic(), server.frame_count
    interrupted = False

    def fps() -> float:
        return (server.frame_count - start_frames) / max(time.monotonic() - start, 1e-9)

    fleet.start()
    try:
        with interruptible():
            deadline = start + (config.run.max_seconds or float("inf"))
            last_log = last_ckpt = time.monotonic()
            while server.frame_count < total and time.monotonic() < deadline:
                time.sleep(POLL_S)
                events = fleet.poll()
                updates += [e for e in events if e.get("type") == "update"]
                telemetry.consume(
                    [e for e in events if e.get("type") != "update"], server.frame_count
                )
                now = time.monotonic()
                if now - last_log >= config.run.log_interval_s:
                    _log(logger, server, updates, telemetry, timings, fps(), on_progress)
                    updates, last_log = [], now
                if now - last_ckpt >= config.run.checkpoint_interval_s:
                    server.pull(agent)  # why: on Ray the global weights live elsewhere
                    save(ckpt_path, config, agent, server, server.frame_count,
                         server.step_count, telemetry.episodes, found.levels,
                         logger.returns_state())  # fmt: skip
                    last_ckpt = now
    except KeyboardInterrupt:
        interrupted = True
        print("\ngazelle: interrupted; saving a checkpoint (re-run the same command to resume)")
    finally:
        fleet.close()
        telemetry.consume(
            [e for e in fleet.poll() if e.get("type") != "update"], server.frame_count
        )
        server.pull(agent)
        save(ckpt_path, config, agent, server, server.frame_count, server.step_count,
             telemetry.episodes, found.levels, logger.returns_state())  # fmt: skip
        if hasattr(fleet, "shutdown"):
            fleet.shutdown()
        logger.progress(server.frame_count, fps(), {})
        logger.console_line(
            server.frame_count, fps(), force=True, actor_restarts=telemetry.restarts
        )
        logger.close()
    return TrainResult(
        frames=server.frame_count,
        updates=server.step_count,
        episodes=telemetry.episodes,
        recent_return=logger.recent_return(),
        level_returns={level: logger.recent_return(level) for level in found.levels},
        fps=fps(),
        logdir=logdir,
        interrupted=interrupted,
        actor_restarts=sum(fleet.restarts),
    )


def _workers(
    config: Config,
    agent: Agent,
    specs: list[ActorSpec],
    settings: TrainerSettings,
    decay_frames: int | None,
) -> tuple[ParameterServer, Fleet]:
    """The parameter server and the (not yet started) workers on `--backend`: local (shared
    Adam, Hogwild, worker processes) or ray (a parameter-server actor, Ray actors). Either
    backend is handed the work its workers run: `run_worker(spec, context, server,
    settings)`."""
    a3c, actors = config.a3c, config.actors
    assert a3c.learning_rate is not None
    if actors.backend == "ray":
        from gazelle.backends.ray.a3c import build_workers

        return build_workers(
            run_worker, agent, specs, settings, a3c.learning_rate, a3c.epsilon, decay_frames,
            actors.ray_address, actors.ray_actor_cpus, actors.actor_timeout_s,
            actors.ray_dashboard,
        )  # fmt: skip
    server = SharedAdamServer(
        agent, len(specs), lr=a3c.learning_rate, eps=a3c.epsilon, decay_frames=decay_frames
    )
    fleet = TaskFleet(specs, run_worker, (server, settings), actor_timeout_s=actors.actor_timeout_s)
    return server, fleet


def _log(
    logger: RunLogger,
    server: ParameterServer,
    updates: list[dict[str, Any]],
    telemetry: Telemetry,
    timings: Timings,
    fps: float,
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> None:
    """One progress row: the mean of the workers' update summaries since the last row."""
    frames = server.frame_count
    names = [k for k in (updates[0] if updates else {}) if "/" in k]
    scalars: dict[str, float] = {
        name: float(np.mean([u[name] for u in updates if name in u])) for name in names
    }
    scalars.update(
        {
            "charts/fps": fps,
            "charts/updates": float(server.step_count),
            "charts/skipped_updates": float(sum(u.get("skipped", 0.0) for u in updates)),
            "charts/actor_restarts": float(telemetry.restarts),
            "charts/actors_hung": float(telemetry.hung),
            "charts/env_errors": float(telemetry.env_errors),
            **timings.means(),
            **telemetry.scores(),
            **telemetry.level_metrics(),
        }
    )
    logger.scalars(scalars, frames)
    logger.progress(frames, fps, scalars)
    logger.console_line(frames, fps, actor_restarts=telemetry.restarts)
    timings.reset()
    if on_progress is not None:
        on_progress(
            {"frames": frames, "fps": fps, "time": time.monotonic(),
             "updates": server.step_count, "episode_return": logger.recent_return()}
        )  # fmt: skip


def _describe(config: Config, workers: int) -> str:
    a3c, env = config.a3c, config.env
    return (
        f"gazelle: a3c on {env.id}: model={config.model.torso} workers={workers}x"
        f"{config.actors.envs_per_actor} envs frames={env.atari_frames or 'as the env'} "
        f"T={a3c.unroll_length} adam lr={a3c.learning_rate:g} gamma={a3c.discounting} "
        f"lambda={a3c.gae_lambda} entropy={a3c.entropy_cost} clip={a3c.grad_norm_clip} "
        f"total_frames={config.run.total_frames:,}"
    )
