"""An A3C worker process (the seed's `A3C.process` loop around its `RunnerThread`):
`run_worker`, the work this algorithm hands its backend (a local process or a Ray actor
runs it as `run_worker(spec, context, server, settings)`).

- The **runner thread** is the runtime's `Actor` (`rollouts.Runner`): it steps the
  worker's envs with its own copy of the policy (pulled from the global network at each
  rollout's start) and puts partial rollouts, with the LSTM state at their start, into a
  bounded queue; as the seed's runner, when asked, it ends a rollout at an episode's end
  and records `V(x_T)` after its last step.
- The **trainer** (the process's main thread) copies the global weights into the local
  network, takes a rollout and what else is waiting until an episode end, computes the A3C
  loss and its gradient, clips it, and applies it to the global network through the shared
  optimiser (`ParameterServer.push`). It reports one "update" event per update (the seed's
  summaries) and counts the frames it trained on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import traceback
from collections.abc import Callable

import torch
from torch import nn

from gazelle.algorithms.a3c.loss import A3CLossSettings, a3c_loss
from gazelle.algorithms.a3c.memory import memory_feed
from gazelle.algorithms.a3c.rollouts import QueueWriter, Runner, pull_rollouts
from gazelle.algorithms.stops import warn
from gazelle.config import Config
from gazelle.runtime.actor import ActorSpec, actor_agent
from gazelle.runtime.allocator import keep_freed_memory
from gazelle.runtime.interfaces import ParameterServer, WorkerContext
from gazelle.runtime.layer_stats import grad_rms, parameter_groups
from gazelle.runtime.policy import LocalPolicy
from gazelle.runtime.unit_health import UnitHealth

#: A worker measures its layer stats and weight norm on one update in this many (the seed
#: writes its summaries every 11th step): on a 20-step Pong rollout, measuring every update
#: was ~10% of the trainer's time (py-spy of a worker: 100 of 920 busy samples).
MEASURE_EVERY = 10


@dataclasses.dataclass(frozen=True)
class TrainerSettings:
    """What a worker's trainer needs besides its actor spec (picklable)."""

    loss: A3CLossSettings
    grad_norm_clip: float | None
    queue_size: int
    action_repeats: int
    rollout_timeout_s: float = 600.0
    end_at_episode_end: bool = False


def trainer_settings(config: Config, action_repeats: int) -> TrainerSettings:
    """A resolved config's trainer settings (`--algo a3c`)."""
    a3c = config.a3c
    assert a3c.advantage_values is not None
    return TrainerSettings(
        loss=A3CLossSettings(
            a3c.discounting, a3c.gae_lambda, a3c.entropy_cost, a3c.baseline_cost,
            a3c.reward_clipping, a3c.advantage_values, float(a3c.reward_scale),
        ),
        grad_norm_clip=a3c.grad_norm_clip,
        queue_size=a3c.queue_size,
        action_repeats=action_repeats,
        end_at_episode_end=bool(a3c.end_rollout_at_episode_end),
    )  # fmt: skip


class ServerParams:
    """The `ParamSource` a worker's policy pulls from: the global network."""

    def __init__(self, server: ParameterServer) -> None:
        self.server = server

    def current_version(self) -> int:
        return self.server.step_count

    def pull(self, module: nn.Module, have_version: int) -> int:
        if self.server.step_count == have_version:
            return have_version
        return self.server.pull(module)


def train_step(
    local: nn.Module,
    server: ParameterServer,
    rollout: dict[str, torch.Tensor],
    settings: TrainerSettings,
    worker: int,
    measure: bool = True,
    health: UnitHealth | None = None,
) -> dict[str, float]:
    """One A3C update: sync, loss, gradient, clip, push. Returns the seed's summaries
    (losses and entropy per sample, the gradient's global norm) and the step; with
    `measure`, also the weights' global norm and the layer stats of the update
    (`layers/grad_rms/<group>` of the clipped gradient, measured here;
    `layers/update_ratio/<group>`, measured by the server where the step is applied). A
    non-finite loss or gradient is not pushed (`skipped` 1, no layer stats). `health`: the
    local network's `UnitHealth`, read on measured updates (`layers/dead_units/<group>`,
    `layers/saturated_gates/<group>`)."""
    server.pull(local)
    recording = health.recording(measure) if health is not None else contextlib.nullcontext()
    with recording:
        loss, metrics = a3c_loss(local, rollout, settings.loss)
    units = health.metrics() if health is not None and measure else {}
    local.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for p in local.parameters() if p.requires_grad]
    clip = settings.grad_norm_clip if settings.grad_norm_clip is not None else float("inf")
    grad_norm = float(nn.utils.clip_grad_norm_(params, clip))
    samples = int(rollout["reward"][1:].numel())
    out = {
        "losses/policy": float(metrics["losses/policy"]) / samples,
        "losses/baseline": float(metrics["losses/baseline"]) / samples,
        "policy/entropy": float(metrics["policy/entropy"]),
        "losses/total": float(loss.detach()) / samples,
        "losses/grad_norm": grad_norm,
        "a3c/advantage_mean": float(metrics["a3c/advantage_mean"]),
        "a3c/rollout_steps": float(rollout["reward"].shape[0] - 1),
    }
    # why: the logits' gradient norms exist for one discrete action set only.
    for name in ("policy/pg_logit_grad_norm", "policy/entropy_logit_grad_norm"):
        if name in metrics:
            out[name] = float(metrics[name])
    if not (math.isfinite(float(loss.detach())) and math.isfinite(grad_norm)):
        return {**out, "skipped": 1.0, "step": float(server.step_count)}
    grads = [p.grad for p in params]
    if measure:
        out["a3c/weight_norm"] = math.sqrt(sum(float(p.detach().pow(2).sum()) for p in params))
        out.update(
            (f"layers/grad_rms/{g}", float(v)) for g, v in grad_rms(parameter_groups(local)).items()
        )
        out.update((name, float(v)) for name, v in units.items())
        step, ratios = server.push_measured(grads, worker)
        out.update(ratios)
    else:
        step = server.push(grads, worker)
    server.add_frames(worker, samples * settings.action_repeats)
    return {**out, "skipped": 0.0, "step": float(step)}


def runner_gone(runner: threading.Thread, errors: list[str], stopping: Callable[[], bool]) -> bool:
    """Whether the trainer should stop for its runner thread: True once the runner has left
    because the run is stopping, False while it runs; raises when it died (with its
    traceback) or left while the run goes on."""
    if errors:
        raise RuntimeError(f"the runner thread died:\n{''.join(errors)}")
    if runner.is_alive():
        return False
    # why: the runner leaves its loop when the run stops, and the trainer may look at it in
    # the moment between (the stop is latched): that is a stop, not a death.
    if stopping():
        return True
    raise RuntimeError("the runner thread died:\nit left its loop while the run goes on")


def run_worker(
    spec: ActorSpec,
    child: WorkerContext,
    server: ParameterServer,
    settings: TrainerSettings,
) -> None:
    """A worker's runner thread and trainer loop, until `child.should_stop()`."""
    # why: one torch thread per process; the runner and the trainer share it.
    torch.set_num_threads(1)
    keep_freed_memory()
    torch.manual_seed(spec.seed)
    stop_runner = threading.Event()
    runner_error: list[str] = []
    actor, runner = None, None
    try:
        local = actor_agent(spec)
        health = UnitHealth(local)
        writer = QueueWriter(
            spec.obs_spec,
            spec.unroll_length,
            spec.envs_per_actor,
            spec.use_lstm,
            settings.queue_size,
        )
        policy = LocalPolicy(actor_agent(spec), ServerParams(server), spec.envs_per_actor)
        actor = Runner(
            spec, writer, policy, child.report, child.beat,
            end_at_episode_end=settings.end_at_episode_end,
            record_bootstrap=settings.loss.advantage_values == "acting",
        )  # fmt: skip

        def run() -> None:
            try:
                actor.run(lambda: stop_runner.is_set() or child.should_stop())
            except Exception:
                runner_error.append(traceback.format_exc())

        runner = threading.Thread(target=run, name="runner", daemon=True)
        runner.start()

        def waiting() -> bool:
            return runner_gone(runner, runner_error, child.should_stop) or child.waiting()

        # why: the main process sees no rollout; worker 0 tests the task for memory
        memory = None
        if spec.actor_id == 0:
            memory = memory_feed(spec.obs_spec, spec.use_lstm, spec.seed, warn=warn)
        updates = 0
        while not child.should_stop():
            rollout = pull_rollouts(writer.rollouts, waiting, settings.rollout_timeout_s)
            if rollout is None:
                break
            measure = updates % MEASURE_EVERY == 0
            summary = train_step(local, server, rollout, settings, spec.actor_id, measure, health)
            updates += 1
            if memory is not None:
                summary.update(memory.add(rollout))
            child.report({"type": "update", "worker": spec.actor_id, **summary})
            child.beat()
    except KeyboardInterrupt:
        pass
    except Exception:
        child.report(
            {"type": "actor_crash", "actor": spec.actor_id, "message": traceback.format_exc()}
        )
        raise
    finally:
        stop_runner.set()
        if runner is not None:
            # why: let the runner leave its step before its envs are closed under it.
            runner.join(timeout=5.0)
        if actor is not None:
            actor.close()
