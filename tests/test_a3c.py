"""A3C: one worker update is a hand-computed Adam step on the clipped gradient; concurrent
workers lose no step count; the runner's queue is joined until an episode end; the loss is
the seed's (returns and GAE of `process_rollout`); a run trains, checkpoints and resumes."""

import copy
import queue

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from gazelle.algorithms.a3c.loss import A3CLossSettings, a3c_loss
from gazelle.algorithms.a3c.rollouts import pull_rollouts
from gazelle.algorithms.a3c.shared_adam import SharedAdamServer
from gazelle.algorithms.a3c.worker import TrainerSettings, train_step
from gazelle.models import Agent
from gazelle.runtime.schedule import LinearDecay
from gazelle.types import ObsSpec

CTX = mp.get_context("spawn")
SPEC = ObsSpec((4,), np.dtype(np.float32), num_actions=3)
T, E = 5, 2
LOSS = A3CLossSettings(0.9, 0.95, 0.01, 0.5, "none")


def rollout(seed=0, done_at=(), t=T):
    g = torch.Generator().manual_seed(seed)
    batch = {
        "frame": torch.randn(t + 1, E, 4, generator=g),
        "action": torch.randint(0, 3, (t + 1, E), generator=g),
        "reward": torch.randn(t + 1, E, generator=g),
        "terminated": torch.zeros(t + 1, E, dtype=torch.bool),
        "truncated": torch.zeros(t + 1, E, dtype=torch.bool),
        "truncation_value": torch.zeros(t + 1, E),
        "baseline": torch.zeros(t + 1, E),
        "policy_logits": torch.zeros(t + 1, E, 3),
        "state_h": torch.zeros(E, 8),
        "state_c": torch.zeros(E, 8),
        "policy_version": torch.tensor(0),
    }
    for step, env in done_at:
        batch["terminated"][step, env] = True
    return batch


def test_the_loss_is_the_seeds_on_one_rollout():
    """One env, no episode end: returns = discount(rewards + [V(x_T)])[:-1] and GAE on the
    TD errors, written out here step by step from the seed's process_rollout."""
    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", core_size=8)
    batch = rollout()
    loss, metrics = a3c_loss(agent, batch, LOSS)
    with torch.no_grad():
        out, _ = agent.unroll({"frame": batch["frame"]}, batch["action"], batch["reward"],
                              torch.zeros(T + 1, E, dtype=torch.bool),
                              (batch["state_h"], batch["state_c"]))  # fmt: skip
    values, logits = out.baseline.numpy(), out.policy_logits
    gamma, lam = LOSS.discounting, LOSS.gae_lambda
    expected, terms = 0.0, np.zeros(3)  # the loss; policy, value and entropy sums
    for env in range(E):
        rewards = batch["reward"][1:, env].numpy()
        v = values[:, env]
        ret, adv, running_ret, running_adv = np.zeros(T), np.zeros(T), v[T], 0.0
        for t in reversed(range(T)):
            running_ret = rewards[t] + gamma * running_ret
            delta = rewards[t] + gamma * v[t + 1] - v[t]
            running_adv = delta + gamma * lam * running_adv
            ret[t], adv[t] = running_ret, running_adv
        logp = torch.log_softmax(logits[:-1, env], -1).numpy()
        p = np.exp(logp)
        actions = batch["action"][1:, env].numpy()
        pi_loss = -np.sum(logp[np.arange(T), actions] * adv)
        vf_loss = 0.5 * np.sum((v[:T] - ret) ** 2)
        entropy = -np.sum(p * logp)
        expected += pi_loss + 0.5 * vf_loss - 0.01 * entropy
        terms += (pi_loss, vf_loss, -entropy)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-4)
    got = [float(metrics[k]) for k in ("losses/policy", "losses/baseline", "losses/entropy")]
    assert got == pytest.approx(terms.tolist(), rel=1e-4, abs=1e-6)


def test_one_update_is_a_hand_computed_adam_step_on_the_clipped_gradient():
    torch.manual_seed(1)
    global_agent = Agent(SPEC, "mlp", core_size=8)
    reference = copy.deepcopy(global_agent)
    server = SharedAdamServer(global_agent, num_workers=2, lr=0.01, eps=1e-8)
    local = Agent(SPEC, "mlp", core_size=8)  # other weights: the update must sync first
    batch = rollout(seed=3)
    batch["reward"] *= 50.0  # a large gradient, so that clipping acts
    settings = TrainerSettings(LOSS, grad_norm_clip=1.0, queue_size=5, action_repeats=4)
    summary = train_step(local, server, batch, settings, worker=1)
    # the same by hand: gradient of the loss at the global weights, clipped to norm 1, Adam
    loss, metrics = a3c_loss(reference, batch, LOSS)
    for name in ("policy/pg_logit_grad_norm", "policy/entropy_logit_grad_norm"):
        assert float(metrics[name]) > 0.0
        assert summary[name] == pytest.approx(float(metrics[name]), rel=1e-5)
    params = list(reference.parameters())
    grads = torch.autograd.grad(loss, params)
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
    assert float(norm) > 1.0 and summary["losses/grad_norm"] == pytest.approx(float(norm), rel=1e-5)
    adam = torch.optim.Adam(params, lr=0.01, eps=1e-8)
    for p, g in zip(params, grads):
        p.grad = g / norm
    adam.step()
    for got, want in zip(global_agent.parameters(), params):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-5, atol=1e-7)
    assert summary["step"] == 1.0 and server.step_count == 1
    assert server.frame_count == T * E * 4


def test_an_unmeasured_update_is_the_same_step_without_the_layer_stats():
    torch.manual_seed(2)
    agent = Agent(SPEC, "mlp", core_size=8)
    servers = [SharedAdamServer(copy.deepcopy(agent), num_workers=1, lr=0.01) for _ in "ab"]
    settings = TrainerSettings(LOSS, grad_norm_clip=1.0, queue_size=5, action_repeats=4)
    measured, unmeasured = (
        train_step(Agent(SPEC, "mlp", core_size=8), server, rollout(seed=4), settings, 0, m)
        for server, m in zip(servers, (True, False))
    )
    for a, b in zip(*(server.params for server in servers)):
        # why: the measured step is applied as its own tensor (param - delta), the other
        # in place (addcdiv): equal to float rounding
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert not any(p.equal(q) for p, q in zip(servers[0].params, agent.parameters()))
    layer_keys = {k for k in measured if k.startswith("layers/")} | {"a3c/weight_norm"}
    assert {"layers/grad_rms/torso", "layers/update_ratio/torso"} <= layer_keys
    assert set(unmeasured) == set(measured) - layer_keys
    assert unmeasured["losses/grad_norm"] == measured["losses/grad_norm"]
    assert unmeasured["step"] == measured["step"] == 1.0
    assert servers[1].frame_count == servers[0].frame_count == T * E * 4


def test_the_learning_rate_decays_linearly_over_the_frames_when_asked():
    grads_of = lambda server: [torch.full_like(p, 0.5) for p in server.params]  # noqa: E731
    constant = SharedAdamServer(Agent(SPEC, "mlp", core_size=8), num_workers=1, lr=0.01)
    decayed = SharedAdamServer(
        Agent(SPEC, "mlp", core_size=8), num_workers=1, lr=0.01,
        schedule=LinearDecay.fresh(0.01, 1000),
    )  # fmt: skip
    for server in (constant, decayed):
        server.add_frames(0, 250)
    assert constant.learning_rate() == 0.01
    assert decayed.learning_rate() == pytest.approx(0.0075)
    # the first Adam step moves every weight by lr (m_hat / sqrt(v_hat) = 1): 0.0075 here
    before = [p.detach().clone() for p in decayed.params]
    decayed.push(grads_of(decayed), 0)
    for old, new in zip(before, decayed.params):
        torch.testing.assert_close(
            old - new.detach(), torch.full_like(old, 0.0075), rtol=1e-4, atol=0
        )
    decayed.add_frames(0, 2000)  # past the budget: no step at all
    assert decayed.learning_rate() == 0.0
    # a resume with a longer budget hands the server the continued schedule
    longer = LinearDecay.fresh(0.01, 1000).resumed(2250, LinearDecay.fresh(0.01, 4500))
    decayed.set_schedule(longer)
    assert decayed.learning_rate() == pytest.approx(0.005)


class OneCellServer(SharedAdamServer):
    """The control: the step count as one cell that every worker reads, adds to and writes
    back (what a shared counter without an atomic add does)."""

    def _step(self, grads, worker, sums):
        count = int(self.steps[0])
        self.steps[0] = count + 1
        return count + 1


def _push_many(server, worker, count, barrier):
    barrier.wait()  # why: both workers push at the same time, or nothing can race
    no_grads = [None] * len(server.params)  # why: the step is then its counting alone
    for _ in range(count):
        server.push(no_grads, worker)
        server.add_frames(worker, 80)  # the seed's global step: frames, one rollout's


def _two_workers_push(server, count):
    barrier = CTX.Barrier(2)
    workers = [CTX.Process(target=_push_many, args=(server, w, count, barrier)) for w in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0


@pytest.mark.slow
def test_two_workers_updating_the_shared_adam_lose_no_step_count():
    """Two processes push at once, as fast as they can, to the same shared Adam: none of
    their steps and frames is lost. The same two workers lose steps on a server whose count
    is one shared cell (the control: so this test can fail)."""
    count = 20_000
    server = SharedAdamServer(Agent(SPEC, "mlp", core_size=8), num_workers=2, lr=1e-3)
    _two_workers_push(server, count)
    assert server.step_count == 2 * count and server.steps.tolist() == [count, count]
    assert server.frame_count == 2 * count * 80
    control = OneCellServer(Agent(SPEC, "mlp", core_size=8), num_workers=2, lr=1e-3)
    _two_workers_push(control, count)
    assert control.step_count < 2 * count, "the control lost no step: nothing raced"


def test_the_queue_is_joined_until_an_episode_end():
    rollouts = queue.Queue()
    parts = [rollout(seed=0), rollout(seed=1, done_at=[(3, 1)]), rollout(seed=2)]
    for k, part in enumerate(parts):
        part["bootstrap"] = torch.full((E,), float(k))  # the runner's V(x_T) of each
        rollouts.put(part)
    joined = pull_rollouts(rollouts, lambda: False, timeout=1.0)
    # the first two (the second ends an episode); the third stays for the next update
    assert joined["reward"].shape == (1 + 2 * T, E) and rollouts.qsize() == 1
    torch.testing.assert_close(joined["reward"][: T + 1], parts[0]["reward"])
    # why: index 0 of the second repeats the first's last step; it appears once
    torch.testing.assert_close(joined["reward"][T + 1 :], parts[1]["reward"][1:])
    torch.testing.assert_close(joined["state_h"], parts[0]["state_h"])
    torch.testing.assert_close(joined["bootstrap"], parts[1]["bootstrap"])  # after the last
    alone = pull_rollouts(rollouts, lambda: False, timeout=1.0)  # nothing else waiting
    assert alone["reward"].shape == (T + 1, E)
    assert pull_rollouts(rollouts, lambda: True, timeout=1.0) is None


@pytest.mark.slow
def test_a3c_trains_checkpoints_resumes_and_is_tested(small_config, tmp_path):
    import json
    import multiprocessing
    import os
    import signal

    from gazelle import checkpoint
    from gazelle.algorithms import train
    from gazelle.evaluation import evaluate

    killed = []

    def kill_one(progress):
        workers = [p for p in multiprocessing.active_children() if "worker" in p.name]
        if not killed and workers:
            os.kill(workers[0].pid, signal.SIGKILL)
            killed.append(workers[0].pid)

    config = small_config(algo="a3c", total_frames=6000, unroll_length=10, envs_per_actor=2)
    first = train(config, on_progress=kill_one)
    assert killed and first.actor_restarts >= len(killed), "a killed worker must be replaced"
    # each update trains on one rollout of T x E = 10 x 2 frames or more; a CartPole
    # episode lasts 500 steps at most, and at most 2 x 2 envs are inside one at the end
    assert first.frames >= 6000 and 1 <= first.updates <= first.frames // 20
    assert first.episodes >= first.frames // 500 - 4
    state = checkpoint.load(tmp_path / "checkpoint.pt")
    assert state["frames"] == first.frames and state["updates"] == first.updates
    assert int(state["optimizer"]["steps"].sum()) == first.updates  # shared Adam's state
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["algo"] == "a3c" and saved["a3c"]["unroll_length"] == 10
    lr = saved["a3c"]["learning_rate"]
    assert saved["a3c"]["learning_rate_decay"]  # the vector preset decays: a schedule saved
    assert state["lr_schedule"] == LinearDecay.fresh(lr, 6000).to_dict()
    second = train(config.replace(total_frames=9000))
    assert second.frames >= 9000 and second.updates > first.updates
    # the first run had reached its end (rate 0): the resume takes the 9000 budget's line
    assert checkpoint.load(tmp_path / "checkpoint.pt")["lr_schedule"] == (
        LinearDecay.fresh(lr, 9000).to_dict()
    )
    results = evaluate(tmp_path, episodes=2, verbose=False)
    assert len(results["levels"]["CartPole-v1"]["returns"]) == 2


def test_a_reward_scale_is_the_same_loss_as_rewards_scaled_by_hand():
    """`--algo a3c --reward-scale s`: the loss on rewards r equals the loss on s * r with
    scale 1, and differs from the unscaled one (the agent does not read the last reward, so
    only the loss sees it)."""
    import dataclasses

    from gazelle.algorithms.a3c.worker import trainer_settings
    from gazelle.config import Config, ConfigError, resolve, validate
    from gazelle.envs.probe import EnvProbe

    torch.manual_seed(0)
    agent = Agent(SPEC, "mlp", core_size=8, last_action_reward=False)
    batch = rollout(seed=3, done_at=[(2, 1)])
    got, _ = a3c_loss(agent, batch, dataclasses.replace(LOSS, reward_scale=0.25))
    want, _ = a3c_loss(agent, {**batch, "reward": batch["reward"] * 0.25}, LOSS)
    unscaled, _ = a3c_loss(agent, batch, LOSS)
    torch.testing.assert_close(got, want)
    assert abs(got.item() - unscaled.item()) > 1e-3
    probe = EnvProbe(["CartPole-v1"], SPEC, 1, "gym")
    config = resolve(Config.of(algo="a3c", reward_scale=0.5), probe)
    assert trainer_settings(config, 1).loss.reward_scale == 0.5  # the flag reaches the loss
    with pytest.raises(ConfigError, match=r"--reward-scale: invalid value 0"):
        validate(Config.of(algo="a3c", env="CartPole-v1", reward_scale=0))
