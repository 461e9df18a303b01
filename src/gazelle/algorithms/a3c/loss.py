"""A3C's loss on a joined rollout, as the seed's `process_rollout` and loss: discounted
returns and GAE advantages (`gazelle.losses.returns.gae`), then
`pi_loss + baseline_cost * vf_loss - entropy_cost * entropy`, all sums over the steps.

The returns and advantages come from the values of `settings.advantage_values`: `acting`,
those the runner computed when it acted and its bootstrap (the seed's `rollout.values` and
`rollout.r`), or `synced`, those of the local network just synced with the global one.
Either way the value loss and the policy's log-probabilities and entropy are the synced
network's (the seed's `pi.vf`, `pi.logits`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gazelle.losses import actor_critic
from gazelle.losses.returns import gae


@dataclass(frozen=True)
class A3CLossSettings:
    """The loss hyperparameters (see `gazelle.config.A3CConfig`)."""

    discounting: float
    gae_lambda: float
    entropy_cost: float
    baseline_cost: float
    reward_clipping: str
    advantage_values: str = "synced"
    reward_scale: float = 1.0


def a3c_loss(
    agent: Any, batch: dict[str, torch.Tensor], settings: A3CLossSettings
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The A3C loss of a `[T+1, E]` rollout (`gazelle.algorithms.a3c.rollouts`).

    The agent's outputs at `t` are computed on observation `t`; the action taken there and
    the reward and episode end it led to are stored at `t + 1` (the unroll layout), and so
    is the runner's value `V(x_t)` (`baseline[t+1]`). The bootstrap is `V(x_T)`, the value
    of the last observation (`synced`: the network's; `acting`: the rollout's `bootstrap`
    `[E]`), used where the rollout did not end its episode; a time-limit cut adds
    `gamma * V(final obs)` (the runner's) to its last reward, as a termination does not.
    """
    # why: the agent's obs spec names the batch's observation fields (every key it reads).
    obs = {name: batch[name] for name in agent.obs_spec.names}
    done = batch["terminated"] | batch["truncated"]
    state = (batch["state_h"], batch["state_c"]) if "state_h" in batch else ()
    out, _ = agent.unroll(obs, batch["action"], batch["reward"], done, state)
    logits, values = out.policy_logits.float(), out.baseline.float()
    gamma = settings.discounting
    # why: the shift by one of the unroll layout (see the docstring).
    rewards = actor_critic.clip_rewards(
        batch["reward"][1:] * settings.reward_scale, settings.reward_clipping
    )
    rewards = rewards + gamma * batch["truncated"][1:].float() * batch["truncation_value"][1:]
    if settings.advantage_values == "acting":
        # why: baseline[t+1] is V(x_t) as the runner computed it at x_t (the same shift).
        baselines, bootstrap = batch["baseline"][1:].float(), batch["bootstrap"]
    elif settings.advantage_values == "synced":
        baselines, bootstrap = values[:-1], values[-1]
    else:
        raise ValueError(
            f"advantage_values: {settings.advantage_values!r}; allowed: acting | synced"
        )
    advantages, returns = gae(rewards, baselines, bootstrap, gamma, settings.gae_lambda, done[1:])
    actions = batch["action"][1:]
    loss, metrics = actor_critic.a3c_loss(
        agent.distribution.log_prob(logits[:-1], actions),
        agent.distribution.entropy(logits[:-1]),
        advantages,
        returns,
        values[:-1],
        value_coef=settings.baseline_cost,
        entropy_coef=settings.entropy_cost,
    )
    if agent.distribution.spec.is_scalar:
        metrics.update(
            actor_critic.logit_grad_norms(logits[:-1], actions, advantages, settings.entropy_cost)
        )
    metrics["a3c/advantage_mean"] = advantages.mean()
    return loss, metrics
