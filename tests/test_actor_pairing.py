"""The real actor, several unrolls in a row, read back as the learner reads them: what the
learner pairs with what the actor did.

- on policy (same weights), the learner's outputs at `[:-1]` are the actor's behaviour
  outputs at `[1:]`, so V-trace's rho is 1;
- index 0 of each unroll repeats the previous unroll's last step;
- the LSTM state written at an unroll's start is the state the learner reaches after the
  previous unroll's steps `0..T-1`, so state is carried across unrolls, not reset;
all of it with the actor's own agent copy, and with a central inference server and the
actor's envs in two groups, each with its own request in flight.
"""

import copy
import itertools
import threading

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.backends.local.buffers import SlotLayout, UnrollBuffers
from gazelle.backends.local.inference import (
    InferenceChannels,
    InferenceServer,
    SharedMemoryInferenceClient,
    group_slot,
)
from gazelle.backends.local.params import ParamStore
from gazelle.envs import make, obs_spec
from gazelle.models import Agent
from gazelle.runtime.actor import Actor, ActorSpec
from gazelle.runtime.policy import CentralPolicy, LocalPolicy

T, ENVS, UNROLLS = 12, 3, 4
ENV = "CartPole-v1"


def _central_policies(actor_spec, agent, params, ctx, stop):
    """One `CentralPolicy` per env group of `actor_spec`, each on its own request slot of a
    real inference server's channels (a thread here, as in the learner's process)."""
    bounds = actor_spec.group_bounds()
    channels = InferenceChannels(
        actor_spec.obs_spec, len(bounds), max(hi - lo for lo, hi in bounds), 256, ctx
    )
    server = InferenceServer(channels, copy.deepcopy(agent), params, torch.device("cpu"), stop)
    server.start()
    return [
        CentralPolicy(SharedMemoryInferenceClient(channels, group_slot(0, g, len(bounds))), hi - lo)
        for g, (lo, hi) in enumerate(bounds)
    ]


# why: the same pairing must hold with the actor's own agent copy and with the central
# server and the envs in two groups (of 1 and 2 envs) acting through their own requests.
@pytest.fixture(scope="module", params=["local", "central, 2 env groups"])
def unrolls(request):
    torch.manual_seed(0)
    spec = obs_spec(make(ENV))
    agent = Agent(spec, torso="mlp")
    ctx = mp.get_context("spawn")
    params = ParamStore(agent, ctx)
    params.publish(agent, 0)
    layout = SlotLayout(T, spec, 256)
    buffers = UnrollBuffers(layout, num_actors=1, slots_per_actor=2 * ENVS, ctx=ctx)
    buffers.attach(buffers.open_channel(0))
    central = request.param != "local"
    actor_spec = ActorSpec(
        actor_id=0,
        level=ENV,
        level_id=0,
        envs_per_actor=ENVS,
        unroll_length=T,
        obs_spec=spec,
        torso="mlp",
        use_lstm=True,
        seed=7,
        env_groups=2 if central else 1,
    )
    stop = threading.Event()
    if central:
        policy = _central_policies(actor_spec, agent, params, ctx, stop)
    else:
        policy = LocalPolicy(Agent(spec, torso="mlp"), params, ENVS)
    actor = Actor(actor_spec, buffers, policy)
    assert len(actor.groups) == actor_spec.env_groups
    batches = []
    for _ in range(UNROLLS):
        slots = buffers.acquire(0, ENVS, timeout=5.0, should_stop=lambda: False)
        actor.unroll(slots)
        buffers.commit(slots, 0, 0, actor.version)
        taken = buffers.take(ENVS, timeout=5.0)
        assert sorted(taken) == sorted(slots)
        # why: gather in the actor's env order, so column j is env j in every unroll.
        batches.append(buffers.gather(slots))
        buffers.release(slots)
    actor.close()
    stop.set()
    return agent, batches


def learner_outputs(agent, batch, steps=None):
    steps = steps if steps is not None else batch["reward"].shape[0]
    done = (batch["terminated"] | batch["truncated"])[:steps]
    with torch.no_grad():
        return agent.unroll(
            {"frame": batch["frame"][:steps]},
            batch["action"][:steps],
            batch["reward"][:steps],
            done,
            (batch["state_h"], batch["state_c"]),
        )


def test_episodes_end_inside_the_unrolls(unrolls):
    # why: the pairing below must also hold across episode ends (state reset inside).
    _, batches = unrolls
    ends = sum(int((b["terminated"] | b["truncated"])[1:].sum()) for b in batches)
    assert ends >= 1


def test_learner_outputs_shifted_by_one_are_the_behaviour_outputs(unrolls):
    agent, batches = unrolls
    for batch in batches:
        out, _ = learner_outputs(agent, batch)
        # why: the actor's output stored at t+1 is what it computed on the obs at t.
        torch.testing.assert_close(out.policy_logits[:-1], batch["policy_logits"][1:])
        torch.testing.assert_close(out.baseline[:-1], batch["baseline"][1:])


def test_rho_is_one_on_policy(unrolls):
    agent, batches = unrolls
    settings = LossSettings(0.99, 0.5, 0.01, "abs_one")
    for batch in batches:
        _, metrics = impala_loss(agent, batch, settings)
        assert float(metrics["vtrace/rho_mean"]) == pytest.approx(1.0, abs=1e-5)


def test_index_zero_repeats_the_previous_last_step(unrolls):
    _, batches = unrolls
    for previous, current in itertools.pairwise(batches):
        for name in ("frame", "reward", "terminated", "truncated", "action", "policy_logits"):
            torch.testing.assert_close(current[name][0], previous[name][T], msg=name)


def test_first_step_of_the_run_starts_an_episode(unrolls):
    _, batches = unrolls
    assert bool(batches[0]["truncated"][0].all())
    assert float(batches[0]["state_h"].abs().sum()) == 0.0


def test_state_is_carried_across_unrolls(unrolls):
    agent, batches = unrolls
    for previous, current in itertools.pairwise(batches):
        # why: the actor stepped the obs at 0..T-1 of the previous unroll; the obs at T is
        # stepped as index 0 of the current one.
        _, (h, c) = learner_outputs(agent, previous, steps=T)
        torch.testing.assert_close(current["state_h"], h)
        torch.testing.assert_close(current["state_c"], c)
        assert float(current["state_h"].abs().sum()) > 0.0
    assert not np.allclose(batches[1]["state_h"].numpy(), batches[2]["state_h"].numpy())


def test_each_env_group_steps_while_the_other_groups_request_is_in_flight():
    """With two env groups, a group's request is sent as soon as its envs have stepped, and
    the other group steps its envs before that request's answer is taken: every wait for
    an answer is overlapped with the other group's env steps."""
    spec = obs_spec(make(ENV))
    params = FixedVersion()
    actor_spec = ActorSpec(0, ENV, 0, 4, 5, spec, "mlp", False, seed=3, env_groups=2)
    policies = [LocalPolicy(Agent(spec, torso="mlp", use_lstm=False), params, 2) for _ in "ab"]
    writer = _NullWriter()
    actor = Actor(actor_spec, writer, policies)
    events = []
    for g, group in enumerate(actor.groups):
        _record(group.policy, "submit", g, events)
        _record(group.policy, "receive", g, events)
        _record(group.envs, "step", g, events)
    for _ in range(2):
        actor.unroll(list(range(4)))
    actor.close()
    receives = [i for i, event in enumerate(events) if event[0] == "receive"]
    assert len(receives) == 2 * 2 * 5  # two unrolls of five steps, each group every step
    for i in receives:
        g = events[i][1]
        sent = max(j for j in range(i) if events[j] == ("submit", g))
        assert ("receive", g) not in events[sent:i]
        if i != receives[0]:
            # why: the other group's envs stepped while this group's request was out.
            assert ("step", 1 - g) in events[sent:i], events[sent : i + 1]


class FixedVersion:
    """A `ParamSource` with version 0 for ever."""

    def current_version(self):
        return 0

    def pull(self, module, have_version):
        return 0


class _NullWriter:
    def write_step(self, slots, t, values):
        pass

    def write_state(self, slots, state):
        pass


def _record(target, name, group, events):
    method = getattr(target, name)

    def recorded(*args, **kwargs):
        events.append((name, group))
        return method(*args, **kwargs)

    setattr(target, name, recorded)
