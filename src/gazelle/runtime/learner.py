"""The learner: a time-major batch of unrolls -> the algorithm's loss -> one optimiser step.

It knows nothing of where batches come from (an iterator of dicts, as acme's learners) nor of
the algorithm: it is handed its loss (`LossFn`, e.g. IMPALA's V-trace loss from
`gazelle.algorithms.impala`) and holds no maths of its own.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from gazelle.runtime.interfaces import Collective
from gazelle.runtime.layer_stats import LayerStats
from gazelle.runtime.unit_health import UnitHealth

#: The units' health (`gazelle.runtime.unit_health`) is measured on one update in this many
#: and reported on each until the next: the LSTM's gates are recomputed for it.
HEALTH_EVERY = 10

#: A loss: `(agent, batch) -> (scalar loss, metrics)`, metrics detached 0-dim tensors.
LossFn = Callable[[nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, dict[str, Any]]]


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX). Without it, torch
    emulates bf16 and a learner step under bf16 autocast ran 13x slower than fp32 (deep
    torso, an AVX2 AMD EPYC, torch 2.13)."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    try:
        return any(bool(getattr(cpu, name)()) for name in checks if hasattr(cpu, name))
    except RuntimeError:
        return False


class Learner:
    """One optimiser step per call of `step(batch, learning_rate)`.

    Args:
        agent: the module trained (on `device`).
        optimizer: over `agent`'s parameters.
        loss_fn: `(agent, batch) -> (loss, metrics)`.
        device: where batches arrive and the agent lives.
        precision: fp32, or bf16 (autocast around the loss).
        grad_norm_clip: clip the global gradient norm to this (None: no clipping).
        after_step: called with the agent after each applied optimiser step (never after a
            skipped one): the loss's own state that follows the weights (PopArt's statistics).
        collective: the run's learners (`--learners N`), each stepping on its share of the
            batch: the gradients are summed over them before the clip and the step, so every
            learner takes the same step, the one a single learner takes on the whole batch
            (the losses are sums over unrolls). None: one learner.
    """

    def __init__(
        self,
        agent: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: LossFn,
        device: torch.device,
        precision: str = "fp32",
        grad_norm_clip: float | None = None,
        after_step: Callable[[nn.Module], None] | None = None,
        collective: Collective | None = None,
    ) -> None:
        self.agent, self.optimizer, self.loss_fn = agent, optimizer, loss_fn
        self.after_step = after_step
        self.collective = collective
        self.grad_norm_clip = grad_norm_clip
        self.device = device
        self.precision = precision
        self.layer_stats = LayerStats(agent)
        self.unit_health = UnitHealth(agent)
        #: `layers/dead_units/*`, `layers/saturated_gates/*` of the last measured update.
        self.health: dict[str, torch.Tensor] = {}
        self.updates = 0  # calls of `step`
        self.skipped = 0  # updates skipped for a non-finite loss or gradient, in all
        self.skipped_in_a_row = 0

    def _autocast(self) -> Any:
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, batch: dict[str, torch.Tensor], learning_rate: float) -> dict[str, Any]:
        """Train on `batch` (already on the device); returns detached metrics.

        A non-finite loss or gradient norm skips the update: weights and optimiser state
        stay as they were, and the metrics say so (`learner/skipped` 1, with
        `learner/nonfinite_loss` or `learner/nonfinite_grad`); `skipped_in_a_row` counts.
        """
        if not self.agent.training:
            self.agent.train()  # why: a walk over every module; APPO steps 80-320x a batch
        measure = self.updates % HEALTH_EVERY == 0
        self.updates += 1
        with self._autocast(), self.unit_health.recording(measure):
            loss, metrics = self.loss_fn(self.agent, batch)
        if measure:
            self.health = self.unit_health.metrics()
        metrics.update(self.health)
        self.optimizer.zero_grad(set_to_none=True)
        # why: one host sync per update (a scalar), the price of never applying a NaN step.
        finite = bool(torch.isfinite(loss.detach()))
        if not finite and self.collective is None:
            return self._skip(metrics, "learner/nonfinite_loss")
        loss.backward()
        # why: every learner must join the sum, also one whose loss is not finite; the
        # count of such learners travels with the gradients, so all skip, for one reason.
        if self.collective is not None and self._sum_gradients(nonfinite=not finite):
            self.optimizer.zero_grad(set_to_none=True)
            return self._skip(metrics, "learner/nonfinite_loss")
        clip = self.grad_norm_clip if self.grad_norm_clip is not None else float("inf")
        norm = nn.utils.clip_grad_norm_(self.agent.parameters(), clip)
        metrics["losses/grad_norm"] = norm.detach()
        if not bool(torch.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            return self._skip(metrics, "learner/nonfinite_grad")
        for group in self.optimizer.param_groups:
            # why: a group may step at a share of the rate (`gazelle.optim.param_groups`)
            group["lr"] = learning_rate * group.get("lr_scale", 1.0)
        self.layer_stats.before_step()
        self.optimizer.step()
        metrics.update(self.layer_stats.after_step())
        if self.after_step is not None:
            self.after_step(self.agent)
        self.skipped_in_a_row = 0
        metrics["learner/skipped"] = 0.0
        return metrics

    def _sum_gradients(self, nonfinite: bool) -> int:
        """Replace each gradient by its sum over the learners: one flat call (one message per
        step, as DDP's buckets without the overlap with the backward pass); returns how many
        learners had a non-finite loss (`nonfinite` is this one's). Parameters with no
        gradient here have none on any learner (the same loss on the same agent) and stay
        without one, so the optimiser leaves them as one learner's would."""
        assert self.collective is not None
        grads = [p.grad for p in self.agent.parameters() if p.grad is not None]
        count = grads[0].new_full((1,), float(nonfinite))
        flat = torch.cat([g.reshape(-1) for g in grads] + [count])
        self.collective.all_reduce_sum(flat)
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
        return int(flat[-1].item())

    def _skip(self, metrics: dict[str, Any], reason: str) -> dict[str, Any]:
        self.skipped += 1
        self.skipped_in_a_row += 1
        return {**metrics, reason: 1.0, "learner/skipped": 1.0}


class Prefetcher:
    """Prepares the next batch on the device while the current one trains (the seed's
    StagingArea): a thread pulls from `batches`, pins and copies without blocking."""

    def __init__(
        self,
        make_batches: Callable[[Callable[[], bool]], Iterator[dict[str, torch.Tensor]]],
        device: torch.device,
    ) -> None:
        """`make_batches(should_stop)` returns the batch iterator; it must end once
        `should_stop()` is true, so `close()` also ends the thread."""
        self._device = device
        # why: a bounded queue keeps memory flat. It is not the seed's one-batch
        # StagingArea: one batch waits here and the thread holds the next while it waits
        # for room, so with one in training three batches are out of the actors' hands, and
        # a lone actor's lag reads about 3 updates (measured 2.8 on Hopper,
        # docs/notes/continuous.md, sitting 8); waiting for room before pulling would take
        # one off, not yet measured on Atari's learning and frames/s.
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._batches = make_batches(self._stop.is_set)
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pin = self._device.type == "cuda"
        try:
            for batch in self._batches:
                if pin:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                batch = {k: v.to(self._device, non_blocking=True) for k, v in batch.items()}
                while not self._stop.is_set():
                    try:
                        self._queue.put(batch, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as err:
            # why: the queue may hold a batch the loop has not taken; wait for room, but
            # never past a stop (the loop may be gone)
            while not self._stop.is_set():
                try:
                    self._queue.put(err, timeout=0.5)
                    return
                except queue.Full:
                    continue

    def get(self, timeout: float) -> dict[str, torch.Tensor]:
        item = self._queue.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self, timeout: float = 10.0) -> bool:
        """Stop the thread and wait for it (bounded); False if it is still running.

        why: the thread runs torch ops with the GIL released. Left running at interpreter
        exit, it is ended by a forced unwind through torch's noexcept frames and the process
        aborts ("terminate called without an active exception", exit -6) after a run that
        finished well. Its batch source polls `should_stop` every 0.5 s and its queue put
        waits 0.5 s, so the join ends within about a second.
        """
        self._stop.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()
