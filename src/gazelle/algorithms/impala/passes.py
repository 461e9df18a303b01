"""The learner's passes over one batch (IMPALA: one step; APPO: `epochs` x `minibatches`),
and how `--learners N` share them: every learner gets the whole batch from rank 0 (one
broadcast) with the order of its passes, and each step trains on its 1/N of the step's
unrolls; the learners' gradients are summed (`Learner`), so each step is the one learner's
on the whole step's unrolls.

A minibatch holds whole unrolls, or with APPO's `--minibatch-unit step` single steps drawn
from all of them (`select_steps`), each carrying the targets taken on its whole unroll as
the epoch started (the run's `step_targets`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol

import torch

from gazelle.algorithms.impala.loss import anchor_of
from gazelle.algorithms.impala.popart import PopArtLoss
from gazelle.backends.local.layout import is_per_unroll
from gazelle.models.value import Reduce
from gazelle.runtime.interfaces import Collective
from gazelle.runtime.learner import Learner, LossFn

#: `(agent, batch) -> fields`: the targets of a `[T+1, B]` batch's steps, `[T, B]` each
#: (`impala.loss.sequence_targets`), for minibatches of steps.
StepTargets = Callable[[Any, dict[str, torch.Tensor]], dict[str, torch.Tensor]]


class Passes(Protocol):
    """What the passes read of a run (`ImpalaRun`, or a learner rank's own); a run may
    also have `step_targets` (`StepTargets`, or None: minibatches of whole unrolls)."""

    learner: Learner

    @property
    def passes(self) -> tuple[int, int]: ...

    @property
    def anchor_at_learner(self) -> bool: ...


def anchors_at_learner(section: Any) -> bool:
    """Whether a run's batches get the learner's policy and values before their passes
    (`anchor_of`): APPO's `--clip-anchor learner` or `--targets batch`."""
    return (
        getattr(section, "clip_anchor", None) == "learner"
        or getattr(section, "targets", None) == "batch"
    )


def reducing(loss_fn: Any, reduce: Reduce) -> LossFn:
    """`loss_fn` with the batch's statistics summed over the learners (`--learners N`): a
    loss taking `reduce` (IMPALA's, APPO's), inside PopArt's statistics too; a loss that
    takes none (a user's) is returned as it is, its statistics its own share's."""
    if isinstance(loss_fn, PopArtLoss):
        return PopArtLoss(reducing(loss_fn.loss, reduce), loss_fn.rate, reduce)
    try:
        takes = "reduce" in inspect.signature(loss_fn).parameters
    except (TypeError, ValueError):
        takes = False
    return functools.partial(loss_fn, reduce=reduce) if takes else loss_fn


def select_unrolls(batch: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """The unrolls `index` (`[b]` integers) of a batch, every field."""
    out = {}
    for name, value in batch.items():
        # why: time-major fields keep B in dim 1; per-unroll fields (state, meta) in dim 0.
        dim = 0 if is_per_unroll(name) else 1
        out[name] = value.index_select(dim, index.to(value.device))
    return out


def select_steps(batch: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """The steps `index` (`[n]` integers into a `[T+1, B]` batch's T x B steps, `t * B + b`)
    as a batch of n one-step unrolls, `[2, n]`: row 0 each step's x_t with what came before
    it, row 1 what followed it (the learner's view shifts by one); fields already shifted,
    `[T, B]` (`PROXIMAL_LOGITS`, the step targets), become `[1, n]`; per-unroll fields `[n]`
    (each step's own unroll's). `steps_of(batch)` once, then `select_unrolls` of it per
    minibatch, is the same."""
    return select_unrolls(steps_of(batch), index)


def steps_of(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A `[T+1, B]` batch laid out by step, so that `select_unrolls` picks steps from it:
    `[2, T*B, ...]` for its `[T+1, B]` fields (rows t and t + 1 of each step t),
    `[1, T*B, ...]` for its `[T, B]` ones, `[T*B]` for its per-unroll ones (step t of unroll
    b at `t * B + b`, as `select_steps`)."""
    length = int(batch["reward"].shape[0]) - 1
    out = {}
    for name, value in batch.items():
        if is_per_unroll(name):
            out[name] = value.unsqueeze(0).expand(length, *value.shape).flatten(0, 1)
        elif value.shape[0] == length + 1:
            # why: step t's inputs are at row t, its action, reward and end at row t + 1.
            out[name] = torch.stack([value[:-1], value[1:]]).flatten(1, 2)
        else:
            out[name] = value.flatten(0, 1).unsqueeze(0)
    return out


def units_of(batch: dict[str, torch.Tensor], by_step: bool) -> int:
    """How many units a pass deals into its minibatches: the batch's steps, or unrolls."""
    size = int(batch["policy_version"].numel())
    return size * (int(batch["reward"].shape[0]) - 1) if by_step else size


def drop_stale(batch: dict[str, torch.Tensor], version: int, max_lag: int | None) -> Any:
    """Drop unrolls whose policy is more than `max_lag` updates old (None keeps all)."""
    if max_lag is None:
        return batch
    keep = (version - batch["policy_version"]) <= max_lag
    if bool(keep.all()):
        return batch
    if not bool(keep.any()):
        return None
    return select_unrolls(batch, keep.nonzero().squeeze(1))


def train_on_batch(
    run: Passes,
    batch: dict[str, torch.Tensor],
    learning_rate: float,
    orders: list[torch.Tensor] | None = None,
) -> Any:
    """The learner's steps on one batch: one (IMPALA), or `epochs` passes of `minibatches`
    steps each on disjoint random shares of its unrolls (APPO). Metrics: the mean over the
    steps taken; `learner/skipped` 1 if any step was skipped for a non-finite value.

    With `--normalize-obs` the batch's vector observations first join the agent's running
    statistics (once per batch, whatever the passes: `gazelle.models.normalize`). With APPO's
    `--clip-anchor learner` the batch then gets the learner's policy and values before its
    passes (`impala.loss.anchor_of`: the clip's anchor and `--targets batch`'s values).
    With `--learners N` (rank 0 calls this), the batch, its learning rate and its order go
    to the other learners first (`share`).

    `orders`: each pass's order of the unrolls; None: dealt from the learner's global RNG
    (seeded by the run, so a seeded run deals them the same way again), with one learner
    one pass at a time as ever (the learner's steps draw from it too), with several all
    first, by rank 0 for every learner."""
    epochs, minibatches = run.passes
    group = getattr(run.learner, "collective", None)
    if group is not None:
        if orders is None and (epochs, minibatches) != (1, 1):
            size = units_of(batch, getattr(run, "step_targets", None) is not None)
            orders = [torch.randperm(size) for _ in range(epochs)]
        share(group, batch, learning_rate, orders)
    return passes(run, batch, learning_rate, orders)


def passes(
    run: Passes,
    batch: dict[str, torch.Tensor],
    learning_rate: float,
    orders: list[torch.Tensor] | None,
) -> dict[str, Any]:
    """The steps of `train_on_batch` in the order `orders` (None: dealt here, see there), on
    this learner's share of each step's unrolls."""
    agent: Any = getattr(run.learner, "agent", None)
    norms = getattr(agent, "obs_norms", None)
    if norms:
        # why: every learner holds the whole batch, so each moves its statistics alike.
        agent.update_obs_stats({name: batch[name] for name in norms})
    if getattr(run, "anchor_at_learner", False):
        batch = {**batch, **anchor_of(agent, batch)}
    group = getattr(run.learner, "collective", None)
    epochs, minibatches = run.passes
    if (epochs, minibatches) == (1, 1) and group is None:
        return run.learner.step(batch, learning_rate)
    step_targets: StepTargets | None = getattr(run, "step_targets", None)
    size = units_of(batch, step_targets is not None)
    steps: list[dict[str, Any]] = []
    for epoch in range(epochs):
        if orders is not None:
            order = orders[epoch]
        else:
            one_pass = (epochs, minibatches) == (1, 1)
            order = torch.arange(size) if one_pass else torch.randperm(size)
        by_step = None
        if step_targets is not None:
            # why: a minibatch of steps holds no unroll to run V-trace along: the targets
            # are the whole unrolls', from the learner as this epoch starts.
            by_step = steps_of({**batch, **step_targets(agent, batch)})
        for minibatch in order.chunk(minibatches):
            # why: validation made every minibatch a multiple of the learners, so the
            # shares are equal and none is empty (every learner joins every sum).
            mine = minibatch if group is None else minibatch.chunk(group.size)[group.rank]
            part = select_unrolls(batch if by_step is None else by_step, mine)
            steps.append(run.learner.step(part, learning_rate))
    merged = steps[0]
    if len(steps) > 1:
        merged = {}
        for name in steps[0]:
            values = [step[name] for step in steps if name in step]
            merged[name] = sum(values) / len(values)
        merged["learner/skipped"] = float(any(step["learner/skipped"] for step in steps))
    return merged if group is None else over_learners(group, merged)


def over_learners(group: Collective, metrics: dict[str, Any]) -> dict[str, Any]:
    """A batch's metrics over the learners, as one learner's on the whole batch would read:
    the losses (`losses/*`, sums over the unrolls) summed, every other metric the mean of
    the learners' (the same number where it is already the batch's: the gradient norm, the
    layers' update ratios; the mean of the shares' otherwise, e.g. explained variance).

    why: one call per batch; every learner ran the same code on the same agent, so the
    same names, in the same (sorted) order."""
    names = sorted(metrics)
    values = torch.stack(
        [torch.as_tensor(metrics[name], dtype=torch.float64).reshape(()).cpu() for name in names]
    ).to(group.device)
    group.all_reduce_sum(values)
    summed = dict(zip(names, values.cpu().tolist(), strict=True))
    return {name: value if _is_sum(name) else value / group.size for name, value in summed.items()}


def _is_sum(name: str) -> bool:
    """A metric that is a sum over the batch's unrolls (the loss terms)."""
    return name.startswith("losses/") and name != "losses/grad_norm"


def share(
    group: Collective,
    batch: dict[str, torch.Tensor],
    learning_rate: float,
    orders: list[torch.Tensor] | None,
) -> None:
    """Rank 0: the batch's header (learning rate, order, fields) as a message, then its
    fields as one byte buffer broadcast to every learner (`receive` on the others)."""
    fields = [(name, value.dtype, tuple(value.shape)) for name, value in batch.items()]
    group.post({"lr": learning_rate, "orders": orders, "fields": fields})
    # why: one call for the batch; each field's bytes, as uint8, one after the other.
    flat = torch.cat([value.contiguous().view(-1).view(torch.uint8) for value in batch.values()])
    group.broadcast(flat)


def receive(
    group: Collective, device: torch.device
) -> tuple[dict[str, torch.Tensor], float, list[torch.Tensor] | None] | None:
    """Ranks > 0: the next batch rank 0 shares, its learning rate and order; None: stop."""
    header = group.next_message()
    if header is None:
        return None
    sizes = []
    for _, dtype, shape in header["fields"]:
        count = int(torch.Size(shape).numel())
        sizes.append(count * torch.empty((), dtype=dtype).element_size())
    flat = torch.empty(sum(sizes), dtype=torch.uint8, device=device)
    group.broadcast(flat)
    batch = {}
    for (name, dtype, shape), part in zip(header["fields"], flat.split(sizes), strict=True):
        # why: a copy, so each field starts where its dtype's alignment wants it.
        batch[name] = part.clone().view(dtype).view(shape)
    return batch, float(header["lr"]), header["orders"]
