"""The algorithm seam: a loss written outside gazelle trains through the same runtime
(actors, backend, learner, logs, checkpoints) with no edit to any of them, and the actors'
telemetry reaches the logs whatever happens to the unrolls."""

import json
import time

import pytest
import torch

from gazelle.algorithms.impala import train
from gazelle.losses import actor_critic
from gazelle.losses.returns import gae

pytestmark = pytest.mark.slow


def nstep_actor_critic_loss(agent, batch):
    """A plain on-policy n-step actor-critic (no off-policy correction), in a few lines."""
    done = batch["terminated"] | batch["truncated"]
    state = (batch["state_h"], batch["state_c"]) if "state_h" in batch else ()
    out, _ = agent.unroll({"frame": batch["frame"]}, batch["action"], batch["reward"], done, state)
    # why: the output at t is the agent's on obs t; its action and reward are at t + 1.
    advantages, returns = gae(
        batch["reward"][1:], out.baseline[:-1], out.baseline[-1], 0.99, 1.0, done[1:]
    )
    # the agent's action distribution turns its policy's parameters into log-probabilities
    # and entropies: the loss terms see nothing else of the action space
    logits, actions = out.policy_logits[:-1], batch["action"][1:]
    log_probs, entropy = (
        agent.distribution.log_prob(logits, actions),
        agent.distribution.entropy(logits),
    )
    return actor_critic.a3c_loss(log_probs, entropy, advantages, returns, out.baseline[:-1])


def test_a_loss_from_outside_trains_end_to_end_through_the_runtime(small_config, tmp_path):
    calls = []

    def counted(agent, batch):
        calls.append(batch["frame"].shape[:2])
        return nstep_actor_critic_loss(agent, batch)

    config = small_config(total_frames=30_000, unroll_length=20, learning_rate=0.004)
    result = train(config, loss_fn=counted)
    assert result.updates == len(calls) and all(shape == (21, 4) for shape in calls)
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    first = next(r["episode_return"] for r in rows if r["episode_return"] is not None)
    # why: CartPole's random policy lasts ~22 steps; the toy loss must have learned.
    assert result.recent_return is not None and result.recent_return > max(2 * first, 60)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["updates"] == result.updates


def logged_episode_returns(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return [e.value for e in events.Scalars("charts/episode_return")]


def test_episodes_of_dropped_unrolls_are_still_logged(small_config, tmp_path):
    """With --max-policy-lag 1 many unrolls are dropped as stale; the episodes that ended in
    them reach the logs anyway, through the actors' own telemetry channel."""
    kept = {"unrolls": 0, "episode_ends": 0}

    def counted(agent, batch):
        # why: a learner slower than the actors keeps every slot full, so each batch's
        # unrolls were acted several updates ago (lag ~ slots / B = 3) and many are dropped
        # whatever the machine's load; without it, a loaded machine slowed the actors
        # instead and too few were (a timing flake on the code before).
        time.sleep(0.03)
        kept["unrolls"] += int(batch["frame"].shape[1])
        # why: index 0 repeats the previous unroll's last step; each end is counted once.
        kept["episode_ends"] += int((batch["terminated"] | batch["truncated"])[1:].sum())
        return nstep_actor_critic_loss(agent, batch)

    config = small_config(total_frames=4000, max_policy_lag=1, slots_per_env=3)
    result = train(config, loss_fn=counted)
    assert result.dropped_unrolls > 0.2 * kept["unrolls"], "the test needs unrolls dropped"
    logged = logged_episode_returns(tmp_path)
    assert len(logged) == result.episodes
    # CartPole episodes last ~10-60 steps here: the dropped unrolls ended dozens of them.
    assert result.episodes >= kept["episode_ends"] + 10
