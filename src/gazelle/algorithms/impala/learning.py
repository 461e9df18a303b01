"""What IMPALA's (and APPO's) learner is handed: its loss from the config (V-trace's, with
PopArt's statistics under `--popart`) and its optimiser, with the LSTM's share of the
rate."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from gazelle.algorithms.impala.loss import LossSettings, impala_loss, sequence_targets
from gazelle.algorithms.impala.passes import StepTargets, reducing
from gazelle.algorithms.impala.popart import PopArtLoss
from gazelle.config import Config
from gazelle.optim import make_optimizer, param_groups
from gazelle.runtime.interfaces import Collective
from gazelle.runtime.learner import Learner, LossFn

#: Makes the loss of a resolved config (the algorithm's choice; IMPALA: V-trace's).
MakeLoss = Callable[[Config], LossFn]


def loss_settings(config: Config) -> LossSettings:
    """The V-trace loss settings of a resolved IMPALA or APPO config."""
    section = config.algorithm
    assert section.entropy_cost is not None and section.vtrace_lambda is not None
    assert section.reward_clipping is not None
    return LossSettings(
        section.discounting,
        section.baseline_cost,
        section.entropy_cost,
        section.reward_clipping,
        section.vtrace_lambda,
        bool(section.normalize_advantages),
        float(section.reward_scale),
        bool(section.popart),
        float(section.popart_rate),
    )


def step_targets_of(config: Config) -> StepTargets | None:
    """With APPO's `--minibatch-unit step`, each epoch's targets of a batch's steps
    (`impala.loss.sequence_targets`: the learner's as the epoch starts, or with
    `--targets batch` those before the passes); None: minibatches of whole unrolls."""
    section = config.algorithm
    if getattr(section, "minibatch_unit", None) != "step":
        return None
    fixed = getattr(section, "targets", None) == "batch"
    return functools.partial(sequence_targets, settings=loss_settings(config), fixed=fixed)


def with_popart(config: Config, loss: Any) -> LossFn:
    """`loss` (taking `keep_targets`), with PopArt's statistics updates under `--popart`."""
    if config.algorithm.popart:
        return PopArtLoss(loss, float(config.algorithm.popart_rate))
    return loss


def vtrace_loss(config: Config) -> LossFn:
    """IMPALA's V-trace actor-critic loss with the config's settings."""
    return with_popart(config, functools.partial(impala_loss, settings=loss_settings(config)))


def make_learner(
    config: Config,
    agent: torch.nn.Module,
    device: torch.device,
    loss_fn: LossFn | None = None,
    make_loss: MakeLoss = vtrace_loss,
    collective: Collective | None = None,
) -> Learner:
    """The optimiser and the learner with `make_loss(config)` (IMPALA's V-trace loss) or
    `loss_fn`, from a resolved config; with `collective`, one of `--learners N`."""
    impala = config.algorithm
    assert impala.optimizer and impala.learning_rate and impala.epsilon is not None
    scale = impala.lstm_lr_scale if impala.lstm_lr_scale is not None else 1.0
    optimizer = make_optimizer(
        impala.optimizer,
        param_groups(agent, scale),
        lr=impala.learning_rate,
        decay=impala.decay,
        momentum=impala.momentum,
        eps=impala.epsilon,
    )
    loss_fn = loss_fn or make_loss(config)
    if collective is not None:
        loss_fn = reducing(loss_fn, collective.all_reduce_sum)
    return Learner(
        agent, optimizer, loss_fn, device, config.run.precision, impala.grad_norm_clip,
        after_step=getattr(loss_fn, "after_step", None), collective=collective,
    )  # fmt: skip
