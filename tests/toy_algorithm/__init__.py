"""A toy algorithm, written as a new algorithm would be: this folder and one registry line
(`gazelle.config.registry.register_algorithm(TOY)`; a built-in one would add its line to
`BUILT_IN_ALGORITHMS`), nothing else of gazelle touched. `tests/test_registry.py` trains it
through `gazelle train`'s own path.

What it is: a plain on-policy n-step actor-critic with GAE (no off-policy correction) on
IMPALA's actors, batches, optimiser and loop. Its section is IMPALA's plus one flag of its
own, `--toy-gae-lambda`, which its preset fills and its validation checks; its loss
reports the lambda it used (`toy/gae_lambda`), so a test can see the preset reach it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gazelle.algorithms.impala import learner_rate
from gazelle.algorithms.impala.presets import IMPALA_PRESETS
from gazelle.algorithms.impala.settings import ImpalaConfig, validate_impala
from gazelle.config import Algorithm, Config

#: The toy's preset: IMPALA's gazelle preset, with its lambda and a larger step.
PRESETS = {
    "gazelle": {
        family: {**values, "toy_gae_lambda": 0.95, "learning_rate": 0.004}
        for family, values in IMPALA_PRESETS["gazelle"].items()
    }
}


@dataclass(frozen=True)
class ToyConfig(ImpalaConfig):
    """The toy n-step actor-critic: IMPALA's settings and its own lambda."""

    toy_gae_lambda: float | None = None
    """GAE's lambda of the toy's advantages and returns; unset: the preset's (0.95)."""


def validate_toy(check: Any) -> None:
    validate_impala(check)
    check.in_range("toy_gae_lambda", 0.0, 1.0, allow_none=True)


def toy_loss(agent: Any, batch: dict[str, Any], gae_lambda: float, discount: float) -> Any:
    """n-step actor-critic on one batch `[T+1, B]`: GAE from the learner's own values."""
    import torch

    from gazelle.losses import actor_critic
    from gazelle.losses.returns import gae

    done = batch["terminated"] | batch["truncated"]
    state = (batch["state_h"], batch["state_c"]) if "state_h" in batch else ()
    out, _ = agent.unroll({"frame": batch["frame"]}, batch["action"], batch["reward"], done, state)
    # why: the output at t is the agent's on obs t; its action and reward are at t + 1.
    advantages, returns = gae(
        batch["reward"][1:], out.baseline[:-1], out.baseline[-1], discount, gae_lambda, done[1:]
    )
    logits, actions = out.policy_logits[:-1], batch["action"][1:]
    log_probs = agent.distribution.log_prob(logits, actions)
    loss, metrics = actor_critic.a3c_loss(
        log_probs, agent.distribution.entropy(logits), advantages, returns, out.baseline[:-1]
    )
    return loss, {**metrics, "toy/gae_lambda": torch.tensor(gae_lambda)}


def make_loss(config: Config) -> Any:
    section = config.algorithm
    return functools.partial(
        toy_loss, gae_lambda=float(section.toy_gae_lambda), discount=section.discounting
    )


def train(config: Config, on_progress: Callable[[dict[str, Any]], None] | None = None) -> Any:
    from gazelle.algorithms.impala.loop import train as impala_train

    return impala_train(config, on_progress, make_loss=make_loss)


TOY = Algorithm(
    name="toy",
    section=ToyConfig,
    train=train,
    presets=PRESETS,
    validate=validate_toy,
    learner_rate=learner_rate,  # IMPALA's learner: the layout rule sizes the actors by it
)
