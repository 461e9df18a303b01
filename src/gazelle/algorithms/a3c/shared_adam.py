"""A3C's global network and shared Adam, Hogwild-style (the A3C seed's global optimiser):
the weights and Adam's moments live in shared memory, and every worker applies its own
gradients to them without a lock.

This is algorithm state, not transport: A3C hands it to the backend as the parameter store
its workers push to (`gazelle.backends.WorkerRequest.make_server`). The local backend
builds it in the driver's process and hands it to each worker process (shared memory); the
Ray backend builds it inside its parameter-server actor, whose calls run one at a time.

Lock-free also means a worker stopped or killed in the middle of an update cannot stall the
others (a lock it held would never be released). What it costs, as in the seed: two workers
updating at once may interleave their writes to a weight or a moment. The step count does
not lose increments: each worker counts its own updates in its own cell, and Adam's bias
correction uses their sum (`tests/test_a3c.py` checks both).

With an LSTM core, the core and the policy head may step at a share of the learning rate
(`lstm_lr_scale`, `--lstm-lr-scale`): the parameters of that share are
`gazelle.optim.param_groups`' first group, as in IMPALA's and APPO's optimisers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from gazelle.optim import param_groups
from gazelle.runtime.schedule import LinearDecay


class SharedAdamServer:
    """The global parameters (shared tensors) with Adam's state; implements
    `gazelle.runtime.interfaces.ParameterServer`.

    Args:
        module: the global network; its parameters are moved to shared memory in place.
        num_workers: workers that push (each owns one step counter).
        lr, betas, eps: Adam's (torch's formula: `lr * m_hat / (sqrt(v_hat) + eps)`).
        schedule: when given, the learning rate follows it (a `LinearDecay` over the env
            frames counted by `add_frames`, as the A3C paper anneals it); None keeps `lr`
            constant, as the starter agent does.
        lstm_lr_scale: the LSTM core and the policy head step at `lr * lstm_lr_scale`
            (`gazelle.optim.param_groups` says which parameters those are; a module
            without a core has none); 1: one rate for every parameter, the seed's.
    """

    def __init__(
        self,
        module: nn.Module,
        num_workers: int,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        schedule: LinearDecay | None = None,
        lstm_lr_scale: float = 1.0,
    ) -> None:
        module.share_memory()
        self.params = [p for p in module.parameters() if p.requires_grad]
        scale_of = {
            id(p): float(group["lr_scale"])
            for group in param_groups(module, lstm_lr_scale)
            for p in group["params"]
        }
        #: Each parameter's share of the learning rate (`lstm_lr_scale` or 1).
        self.lr_scales = [scale_of[id(p)] for p in self.params]
        #: Each parameter's layer group (`gazelle.runtime.layer_stats.parameter_groups`).
        self.groups = [n.split(".", 1)[0] for n, p in module.named_parameters() if p.requires_grad]
        self.exp_avg = [torch.zeros_like(p).share_memory_() for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p).share_memory_() for p in self.params]
        # why: one counter per worker, each written by its worker only: no increment is
        # ever lost to a race, and no lock is needed.
        self.steps = torch.zeros(num_workers, dtype=torch.int64).share_memory_()
        #: Env frames each worker has trained on (the global step counts frames).
        self.frames = torch.zeros(num_workers, dtype=torch.int64).share_memory_()
        self.lr, self.betas, self.eps = lr, betas, eps
        self.schedule = schedule

    @property
    def step_count(self) -> int:
        """Updates applied by all workers together."""
        return int(self.steps.sum())

    @property
    def frame_count(self) -> int:
        """Env frames trained on by all workers together."""
        return int(self.frames.sum())

    def add_frames(self, worker: int, frames: int) -> None:
        self.frames[worker] += frames

    def learning_rate(self) -> float:
        """The learning rate of the next update (see `schedule`)."""
        return self.lr if self.schedule is None else self.schedule(self.frame_count)

    def set_schedule(self, schedule: LinearDecay | None) -> None:
        """Follow `schedule` from now on; a worker started after this call gets it (each
        is handed this object when it starts)."""
        self.schedule = schedule

    def pull(self, module: nn.Module) -> int:
        """Copy the global weights into a worker's local `module`; returns the step count."""
        with torch.no_grad():
            for local, shared in zip(
                (p for p in module.parameters() if p.requires_grad), self.params
            ):
                local.copy_(shared)
        return self.step_count

    def load_weights(self, module: nn.Module) -> None:
        """Make `module`'s weights the global ones (after a restore; here the global
        network usually is `module` itself, and the copy changes nothing)."""
        with torch.no_grad():
            for shared, local in zip(
                self.params, (p for p in module.parameters() if p.requires_grad)
            ):
                if shared.data_ptr() != local.data_ptr():
                    shared.copy_(local)

    def push(self, grads: Sequence[torch.Tensor | None], worker: int) -> int:
        """Apply one Adam step with a worker's gradients (same order as the parameters;
        None: no gradient); returns the step count after it."""
        return self._step(grads, worker, None)

    def push_measured(
        self, grads: Sequence[torch.Tensor | None], worker: int
    ) -> tuple[int, dict[str, float]]:
        """`push`, and what the step did per layer group: `layers/update_ratio/<group>`, the
        norm of this step over the group's weight norm before it (`gazelle.runtime.
        layer_stats`). Measured on the step itself, so other workers' writes at the same
        moment do not count."""
        sums: dict[str, list[float]] = {}
        step = self._step(grads, worker, sums)
        return step, {
            f"layers/update_ratio/{group}": math.sqrt(update) / max(math.sqrt(weight), 1e-12)
            for group, (update, weight) in sums.items()
        }

    @torch.no_grad()
    def _step(
        self,
        grads: Sequence[torch.Tensor | None],
        worker: int,
        sums: dict[str, list[float]] | None,
    ) -> int:
        """One Adam step; with `sums`, adds each group's `[update norm², weight norm²]`."""
        self.steps[worker] += 1
        step = self.step_count
        beta1, beta2 = self.betas
        bias1 = 1.0 - beta1**step
        bias2 = 1.0 - beta2**step
        lr = self.learning_rate()
        for param, grad, m, v, group, scale in zip(
            self.params, grads, self.exp_avg, self.exp_avg_sq, self.groups, self.lr_scales
        ):
            if grad is None:
                continue
            m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            denom = (v / bias2).sqrt_().add_(self.eps)
            # why: `lr * 1.0` is `lr` exactly, so at scale 1 the step is bit for bit the
            # one-rate step (tests/test_lstm_step.py checks it).
            step_size = lr * scale / bias1
            if sums is None:
                param.addcdiv_(m, denom, value=-step_size)
                continue
            # why: the step as its own tensor, to measure it: one more [param] buffer.
            delta = (m / denom).mul_(step_size)
            total = sums.setdefault(group, [0.0, 0.0])
            total[0] += float(delta.pow(2).sum())
            total[1] += float(param.pow(2).sum())
            param.sub_(delta)
        return step

    def state_dict(self) -> dict[str, object]:
        return {
            "exp_avg": [t.clone() for t in self.exp_avg],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
            "steps": self.steps.clone(),
            "frames": self.frames.clone(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore the moments and the step count (the counters sum, whatever the number of
        workers then and now)."""
        for target, value in zip(self.exp_avg, state["exp_avg"]):  # type: ignore[call-overload]
            target.copy_(value)
        for target, value in zip(self.exp_avg_sq, state["exp_avg_sq"]):  # type: ignore[call-overload]
            target.copy_(value)
        steps = state["steps"]
        assert isinstance(steps, torch.Tensor)
        self.steps.zero_()
        self.steps[0] = int(steps.sum())
        frames = state.get("frames")
        self.frames.zero_()
        if isinstance(frames, torch.Tensor):
            self.frames[0] = int(frames.sum())
