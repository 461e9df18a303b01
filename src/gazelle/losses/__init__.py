"""Pure loss functions: V-trace, discounted returns and GAE, actor-critic loss terms.

Everything here is a function of tensors and keyword hyperparameters; nothing of gazelle is
imported but `gazelle.types`.
"""

from gazelle.losses import vtrace
from gazelle.losses.actor_critic import (
    REWARD_CLIPPING_MODES,
    Metrics,
    a3c_loss,
    baseline_loss,
    clip_rewards,
    entropy_loss,
    impala_loss,
    logit_grad_norms,
    policy_gradient_loss,
)
from gazelle.losses.returns import discount, gae
from gazelle.losses.vtrace import VTraceFromLogitsReturns, VTraceReturns

__all__ = [
    "REWARD_CLIPPING_MODES",
    "Metrics",
    "VTraceFromLogitsReturns",
    "VTraceReturns",
    "a3c_loss",
    "baseline_loss",
    "clip_rewards",
    "discount",
    "entropy_loss",
    "gae",
    "impala_loss",
    "logit_grad_norms",
    "policy_gradient_loss",
    "vtrace",
]
