"""The learner: a time-major batch of unrolls -> V-trace loss -> one optimiser step.

It knows nothing of where batches come from (an iterator of dicts, as acme's learners) and
holds no maths of its own: V-trace and the loss terms come from `gazelle.losses`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gazelle.losses import actor_critic, vtrace
from gazelle.models import Agent
from gazelle.runtime.layer_stats import LayerStats
from gazelle.types import INSTRUCTION


@dataclass(frozen=True)
class LossSettings:
    """The loss hyperparameters of one run (see `gazelle.config.ImpalaConfig`)."""

    discounting: float
    baseline_cost: float
    entropy_cost: float
    reward_clipping: str
    grad_norm_clip: float | None


def impala_loss(
    agent: Agent, batch: dict[str, torch.Tensor], settings: LossSettings
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IMPALA's loss on one batch of `[T+1, B]` unrolls (the seed's `build_learner`)."""
    obs = {"frame": batch["frame"]}
    if INSTRUCTION in batch:
        obs[INSTRUCTION] = batch[INSTRUCTION]
    done = batch["terminated"] | batch["truncated"]
    state = (batch["state_h"], batch["state_c"]) if "state_h" in batch else ()
    learner_out, _ = agent.unroll(obs, batch["action"], batch["reward"], done, state)
    logits = learner_out.policy_logits.float()
    baseline = learner_out.baseline.float()

    # why: the env outputs at t are the inputs that led to the learner outputs at t. After
    # the shift by one, the behaviour action/logits at t are what led to the env output
    # (reward, end of episode) at t+1, and the learner's value at t is V(x_t).
    bootstrap_value = baseline[-1]
    actions = batch["action"][1:]
    behaviour_logits = batch["policy_logits"][1:]
    rewards = actor_critic.clip_rewards(batch["reward"][1:], settings.reward_clipping)
    terminated, truncated = batch["terminated"][1:], batch["truncated"][1:]
    # A cut episode is bootstrapped from V(its last obs), computed by the actor when the cut
    # happened; a terminated one is not. Neither carries value across the episode boundary.
    rewards = rewards + settings.discounting * truncated.float() * batch["truncation_value"][1:]
    discounts = (~(terminated | truncated)).float() * settings.discounting

    vtrace_returns = vtrace.from_logits(
        behaviour_policy_logits=behaviour_logits,
        target_policy_logits=logits[:-1],
        actions=actions,
        discounts=discounts,
        rewards=rewards,
        values=baseline[:-1],
        bootstrap_value=bootstrap_value,
    )
    return actor_critic.impala_loss(
        target_logits=logits[:-1],
        actions=actions,
        vtrace_returns=vtrace_returns,
        values=baseline[:-1],
        baseline_cost=settings.baseline_cost,
        entropy_cost=settings.entropy_cost,
    )


class Learner:
    """One optimiser step per call of `step(batch, learning_rate)`."""

    def __init__(
        self,
        agent: Agent,
        optimizer: torch.optim.Optimizer,
        settings: LossSettings,
        device: torch.device,
        precision: str = "fp32",
    ) -> None:
        self.agent, self.optimizer, self.settings = agent, optimizer, settings
        self.device = device
        self.precision = precision
        self.layer_stats = LayerStats(agent)

    def _autocast(self) -> Any:
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, batch: dict[str, torch.Tensor], learning_rate: float) -> dict[str, Any]:
        """Train on `batch` (already on the device); returns detached metrics."""
        self.agent.train()
        with self._autocast():
            loss, metrics = impala_loss(self.agent, batch, self.settings)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.settings.grad_norm_clip is not None:
            norm = nn.utils.clip_grad_norm_(self.agent.parameters(), self.settings.grad_norm_clip)
            metrics["losses/grad_norm"] = norm.detach()
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        self.layer_stats.before_step()
        self.optimizer.step()
        metrics.update(self.layer_stats.after_step())
        return metrics


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
        # why: one batch in flight adds at most one update of policy lag, as the seed's
        # StagingArea; a bounded queue keeps memory flat.
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
            self._queue.put(err)

    def get(self, timeout: float) -> dict[str, torch.Tensor]:
        item = self._queue.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
