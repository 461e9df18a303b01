"""IMPALA (Espeholt et al., 2018): actors unroll the agent, the learner corrects the policy
lag with V-trace. `loss` pairs the batch for `gazelle.losses`, `build` wires a run from a
config, `loop.train` runs it."""

from gazelle.algorithms.impala.build import ImpalaRun, build
from gazelle.algorithms.impala.loop import train
from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.algorithms.runstate import TrainResult

__all__ = ["ImpalaRun", "LossSettings", "TrainResult", "build", "impala_loss", "train"]
