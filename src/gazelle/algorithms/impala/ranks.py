"""`--learners N` for IMPALA and APPO: ranks 1..N-1, each its own agent, optimiser and
learner, train on their share of every batch rank 0 (the run's loop) shares with them
(`passes`). The backend starts them and joins the group (`gazelle.backends.build_learners`);
this module is the work each runs and the state they start from.

Every learner's weights and optimiser state stay bit-identical to rank 0's: they start from
rank 0's (after a resume: the checkpoint's), and each step applies the same summed gradient
with the same optimiser and learning rate (`runtime.learner.Learner`)."""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from gazelle.algorithms.impala.build import (
    MakeLoss,
    make_learner,
    new_agent,
    step_targets_of,
    value_levels,
    vtrace_loss,
)
from gazelle.algorithms.impala.passes import StepTargets, anchors_at_learner, passes, receive
from gazelle.algorithms.stops import warn_on_error
from gazelle.backends import LearnerRequest, Learners, build_learners
from gazelle.config import Config
from gazelle.runtime.allocator import keep_freed_memory
from gazelle.runtime.interfaces import Collective
from gazelle.runtime.learner import Learner, LossFn
from gazelle.types import ObsSpec

if TYPE_CHECKING:
    from gazelle.algorithms.impala.build import ImpalaRun


@dataclasses.dataclass(frozen=True)
class RankSettings:
    """What a learner rank builds its learner from (picklable: it travels to the rank)."""

    config: Config  # resolved
    obs_spec: ObsSpec
    levels: int  # the value head's outputs (`build.value_levels`)
    loss_fn: LossFn | None
    make_loss: MakeLoss
    threads: int  # torch threads on CPU


@dataclasses.dataclass
class _Rank:
    """A rank's side of `passes.Passes`."""

    learner: Learner
    passes: tuple[int, int]
    anchor_at_learner: bool
    step_targets: StepTargets | None = None


def start(
    config: Config,
    found: Any,
    device: torch.device,
    loss_fn: LossFn | None = None,
    make_loss: MakeLoss | None = None,
) -> Learners:
    """Start ranks 1..N-1 of a resolved config on its backend and join them as rank 0;
    the CPU's learner threads are shared among them."""
    size = config.run.learners
    try:
        pickle.dumps((loss_fn, make_loss))
    except Exception as err:
        raise ValueError(
            f"--learners {size}: the loss ({loss_fn or make_loss!r}) must be picklable to "
            f"reach the other learners' processes ({type(err).__name__}: {err}); allowed: a "
            "module-level function or a picklable object, or --learners 1"
        ) from err
    threads = max(1, torch.get_num_threads() // size)
    # why: N learners each with all of the learner's threads would oversubscribe the cores.
    torch.set_num_threads(threads)
    settings = RankSettings(
        config,
        found.obs_spec,
        value_levels(config, len(found.levels)),
        loss_fn,
        make_loss or vtrace_loss,
        threads,
    )
    actors = config.actors
    request = LearnerRequest(
        follow,
        settings,
        size,
        device,
        config.run.learner_timeout_s,
        cluster_address=actors.ray_address,
        # why: a GPU learner's CPU work is feeding its GPU: one core
        cpus_per_learner=float(threads) if device.type == "cpu" else 1.0,
        dashboard=actors.ray_dashboard,
        allow_tokenless=actors.ray_allow_tokenless,
    )
    return build_learners(config.actors.backend, request)


def follow(collective: Collective, settings: RankSettings) -> None:
    """Rank r > 0: build the learner, take rank 0's weights and optimiser state, then train
    on its share of each batch rank 0 shares, until rank 0 says stop."""
    torch.set_num_threads(settings.threads)
    keep_freed_memory()
    config, device = settings.config, collective.device
    agent = new_agent(config, settings.obs_spec, settings.levels, device)
    learner = make_learner(config, agent, device, settings.loss_fn, settings.make_loss, collective)
    load_start(collective, agent, learner.optimizer)
    section = config.algorithm
    epochs = int(getattr(section, "epochs", None) or 1)
    minibatches = int(getattr(section, "minibatches", None) or 1)
    rank = _Rank(
        learner, (epochs, minibatches), anchors_at_learner(section), step_targets_of(config)
    )
    while (got := receive(collective, device)) is not None:
        batch, learning_rate, orders = got
        passes(rank, batch, learning_rate, orders)


def send_start(collective: Collective, agent: torch.nn.Module, optimizer: Any) -> None:
    """Rank 0: its weights (buffers too: PopArt's and the observations' statistics) and
    optimiser state to every learner, on the CPU (each loads them onto its own device);
    returns once every learner has loaded them (within their start-up bound)."""
    state = {
        "agent": {k: v.detach().cpu() for k, v in agent.state_dict().items()},
        "optimizer": _to_cpu(optimizer.state_dict()),
    }
    collective.post(state)
    # why: after this, every collective call is a step's, bounded by --learner-timeout-s.
    collective.barrier()


def load_start(collective: Collective, agent: torch.nn.Module, optimizer: Any) -> None:
    """Ranks > 0: rank 0's weights and optimiser state (`send_start`)."""
    state = collective.next_message()
    agent.load_state_dict(state["agent"])
    optimizer.load_state_dict(state["optimizer"])
    collective.barrier()


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


@contextlib.contextmanager
def learner_faults(run: ImpalaRun) -> Iterator[None]:
    """A collective call of `--learners N` that fails inside (a learner died, or did not
    answer within --learner-timeout-s) becomes the backend's one-line `LearnerLost`, naming
    the learner; any other error passes unchanged."""
    try:
        yield
    except Exception as err:
        lost = run.learners.lost(err) if run.learners is not None else None
        if lost is None:
            raise
        raise lost from err


def close_learners(run: ImpalaRun, timeout: float = 2.0) -> None:
    """Stop ranks 1..N-1; never raises (see `stops.warn_on_error`).

    why: a learner waiting for the next batch leaves at once when told; one caught in a
    step's collective call (the run ended inside a step: an error, Ctrl-C) never reads it,
    and holds nothing to save (rank 0 checkpoints), so it is killed after `timeout`."""
    if run.learners is not None:
        learners = run.learners
        warn_on_error("stopping the learners", lambda: learners.close(timeout))
