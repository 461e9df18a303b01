"""Central inference (dynamic batching): same outputs as local inference, batching across
actors, weight updates, timeouts and shutdown; and a short training run with it."""

import copy
import json
import threading
import time

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from gazelle.backends.local.channels import StopFlag
from gazelle.backends.local.inference import (
    InferenceChannels,
    InferenceServer,
    SharedMemoryInferenceClient,
)
from gazelle.backends.local.params import ParamStore
from gazelle.cli import main
from gazelle.config import Config, ConfigError, validate
from gazelle.config.presets import DEFAULT_CENTRAL_GROUPS
from gazelle.models import Agent
from gazelle.runtime.policy import CentralPolicy, LocalPolicy, PolicyStopped
from gazelle.types import ObsSpec

CTX = mp.get_context("spawn")
SPEC = ObsSpec((4,), np.dtype(np.float32), num_actions=3)
ENVS = 3


def central_policy(channels, actor_id, num_envs, should_stop=lambda: False, timeout_s=120.0):
    """A `CentralPolicy` over actor `actor_id`'s shared-memory client."""
    client = SharedMemoryInferenceClient(channels, actor_id, should_stop, timeout_s)
    return CentralPolicy(client, num_envs)


def _serve(num_actors=1, max_wait_s=0.002, max_batch=None, use_lstm=True, seed=0):
    """A server thread over fresh channels; returns (server, stop, params, agent)."""
    torch.manual_seed(seed)
    agent = Agent(SPEC, torso="mlp", use_lstm=use_lstm, core_size=8)
    params = ParamStore(agent, CTX)
    params.publish(agent, 0)
    channels = InferenceChannels(SPEC, num_actors, ENVS, 8 if use_lstm else 0, CTX)
    stop = threading.Event()
    server = InferenceServer(
        channels,
        copy.deepcopy(agent),
        params,
        torch.device("cpu"),
        stop,
        max_batch=max_batch,
        max_wait_s=max_wait_s,
    )
    server.start()
    return server, stop, params, agent


def _inputs(step, rng):
    obs = {"frame": torch.from_numpy(rng.standard_normal((ENVS, 4)).astype(np.float32))}
    action = torch.from_numpy(rng.integers(0, 3, ENVS))
    reward = torch.from_numpy(rng.standard_normal(ENVS).astype(np.float32))
    done = torch.from_numpy(rng.random(ENVS) < 0.3) | (step == 0)
    return obs, action, reward, done


@pytest.mark.parametrize("use_lstm", [True, False])
def test_central_and_local_give_the_same_outputs(use_lstm):
    server, stop, params, agent = _serve(use_lstm=use_lstm)
    try:
        local = LocalPolicy(copy.deepcopy(agent), params, ENVS)
        central = central_policy(server.channels, 0, ENVS, timeout_s=10.0)
        local.begin_unroll()
        central.begin_unroll()
        rng = np.random.default_rng(0)
        for step in range(8):  # with episode resets (done) on the way
            obs, action, reward, done = _inputs(step, rng)
            want = local.step(obs, action, reward, done)
            got = central.step(obs, action, reward, done)
            torch.testing.assert_close(got.policy_logits, want.policy_logits)
            torch.testing.assert_close(got.baseline, want.baseline)
            for mine, theirs in zip(central.state, local.state):
                torch.testing.assert_close(mine, theirs)
            index = torch.tensor([0, 2])
            final = {"frame": obs["frame"][index] + 1.0}
            torch.testing.assert_close(
                central.values(final, action[index], reward[index], index),
                local.values(final, action[index], reward[index], index),
            )
        assert central.version == local.version == 0
    finally:
        stop.set()
        server.close()


def test_requests_of_two_actors_are_batched_together():
    server, stop, _, _ = _serve(num_actors=2, max_wait_s=0.05)
    errors = []

    def actor(actor_id):
        try:
            policy = central_policy(server.channels, actor_id, ENVS, timeout_s=10.0)
            rng = np.random.default_rng(actor_id)
            for step in range(10):
                policy.step(*_inputs(step, rng))
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors
        stats = server.stats()
        assert stats["rows"] == 2 * 10 * ENVS
        assert stats["max"] == 2 * ENVS  # both actors' envs in one agent step
        assert stats["batches"] < 20
    finally:
        stop.set()
        server.close()


def test_max_batch_splits_batches():
    server, stop, _, _ = _serve(num_actors=2, max_wait_s=0.05, max_batch=ENVS)
    try:
        policies = [central_policy(server.channels, i, ENVS, timeout_s=10.0) for i in range(2)]
        rng = np.random.default_rng(0)
        threads = [
            threading.Thread(target=p.step, args=_inputs(0, rng), daemon=True) for p in policies
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert server.stats()["max"] == ENVS and server.stats()["batches"] == 2
    finally:
        stop.set()
        server.close()


def test_server_picks_up_new_weights_and_reports_the_version():
    server, stop, params, agent = _serve()
    try:
        central = central_policy(server.channels, 0, ENVS, timeout_s=10.0)
        rng = np.random.default_rng(0)
        obs, action, reward, done = _inputs(0, rng)
        central.begin_unroll()
        before = central.step(obs, action, reward, done)
        assert central.version == 0
        with torch.no_grad():
            for p in agent.parameters():
                p.add_(0.5)
        params.publish(agent, 7)
        central.begin_unroll()
        central.state = tuple(torch.zeros_like(s) for s in central.state)
        after = central.step(obs, action, reward, done)
        assert central.version == 7
        want, _ = agent.act(obs, action, reward, done, agent.initial_state(ENVS))
        torch.testing.assert_close(after.policy_logits, want.policy_logits)
        assert not torch.allclose(after.policy_logits, before.policy_logits)
    finally:
        stop.set()
        server.close()


def test_a_silent_actor_does_not_wedge_the_server_and_stop_ends_it():
    server, stop, _, _ = _serve(num_actors=2, max_wait_s=0.01)
    try:
        # Actor 1 sends a request and dies: it never reads its answer.
        dead = central_policy(server.channels, 1, ENVS, timeout_s=10.0)
        channels = server.channels
        channels.count[1] = ENVS
        channels.request_seq[1] = dead.client.seq + 1
        channels.wake.release()
        alive = central_policy(server.channels, 0, ENVS, timeout_s=10.0)
        rng = np.random.default_rng(0)
        for step in range(3):
            alive.step(*_inputs(step, rng))
        # Its successor continues the sequence numbers and is served too.
        successor = central_policy(server.channels, 1, ENVS, timeout_s=10.0)
        assert successor.client.seq == dead.client.seq + 1
        successor.step(*_inputs(0, rng))
    finally:
        stop.set()
        start = time.monotonic()
        server.close(timeout=5.0)
    assert not server.alive() and time.monotonic() - start < 2.0 and server.error is None


def test_client_waits_have_timeouts_and_see_the_stop():
    channels = InferenceChannels(SPEC, 1, ENVS, 8, CTX)  # no server
    rng = np.random.default_rng(0)
    with pytest.raises(TimeoutError, match="inference server"):
        central_policy(channels, 0, ENVS, timeout_s=0.3).step(*_inputs(0, rng))
    with pytest.raises(PolicyStopped):
        central_policy(channels, 0, ENVS, should_stop=lambda: True).step(*_inputs(0, rng))


def test_a_dead_server_fails_the_run_with_its_error():
    from gazelle.backends.local import LocalFleet

    server, stop, _, _ = _serve()
    server.agent.step = None  # the next batch raises inside the server thread
    rng = np.random.default_rng(0)
    with pytest.raises(TimeoutError):
        central_policy(server.channels, 0, ENVS, timeout_s=0.5).step(*_inputs(0, rng))
    server.close(timeout=5.0)
    assert not server.alive() and "TypeError" in server.error
    supervisor = LocalFleet([], None, None, CTX, server=server, stop_event=StopFlag())
    with pytest.raises(RuntimeError, match=r"inference server died(?s:.)*TypeError"):
        supervisor.check()
    stop.set()


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("inference", "gpu", "auto | local | central"),
        ("inference_max_wait_ms", -1.0, "a number in"),
        ("inference_max_batch", 0, "a positive integer"),
        ("inference_max_batch", 2, "at least --envs-per-actor (4"),
        ("env_groups", 0, "a positive integer"),
        ("env_groups", 5, "at most --envs-per-actor (4)"),
    ],
)
def test_bad_inference_values_are_config_errors(field, value, allowed):
    with pytest.raises(ConfigError) as err:
        validate(Config.of(envs_per_actor=4, **{field: value}))
    message = str(err.value)
    assert message.startswith("--" + field.replace("_", "-")) and allowed in message


def test_env_groups_need_central_inference(capsys):
    """Groups only hide the central server's round trip: with local inference, named or
    picked by auto on a CPU learner, more than one is refused in one line."""
    with pytest.raises(ConfigError, match="--env-groups: invalid value 2; allowed: 1 with "):
        validate(Config.of(envs_per_actor=4, inference="local", env_groups=2))
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--env", "CartPole-v1", "--env-groups", "2", "--logdir", "/tmp/gz-g"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--env-groups: invalid value 2; allowed: 1 with --inference local (the learner" in err
    assert "Traceback" not in err
    with pytest.raises(ConfigError, match="1 with --algo a3c"):
        validate(Config.of(algo="a3c", env_groups=2))


def test_cli_bad_inference_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--inference", "gpu", "--logdir", "/tmp/gz-inference-x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--inference: invalid value 'gpu'; allowed: auto | local | central" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_training_with_central_inference(tmp_path):
    from gazelle.algorithms.impala import train

    config = Config.of(
        env="CartPole-v1",
        num_actors=2,
        envs_per_actor=4,
        batch_size=4,
        unroll_length=10,
        total_frames=2000,
        log_interval_s=0.5,
        checkpoint_interval_s=1000.0,
        inference="central",
        logdir=str(tmp_path),
    )
    result = train(config)
    assert result.frames >= 2000 and result.episodes > 0 and result.actor_restarts == 0
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    # why: each request is one env group's 2 envs; more rows in a batch: several requests.
    assert any(r.get("charts/inference_batch", 0) > 2 for r in rows)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["actors"]["inference"] == "central"
    assert saved["actors"]["env_groups"] == DEFAULT_CENTRAL_GROUPS == 2


def test_the_ray_inference_servers_thread_reports_its_failure_to_every_caller():
    """The Ray server's batching thread dies on a bad batch: the callers waiting on it, and
    every later call and heartbeat, raise its error instead of waiting forever (the server
    class is plain Python; no Ray needed)."""
    from gazelle import registrations
    from gazelle.backends.ray.inference import InferenceHost, ServerFailed

    class Broken(torch.nn.Module):
        def step(self, *args, **kwargs):
            raise ValueError("bad batch")

    host = InferenceHost(registrations.capture(), Broken(), "cpu", max_batch=4, max_wait_s=0.05)
    inputs = {
        "frame": np.zeros((1, 4), np.float32), "last_action": np.zeros(1, np.int64),
        "reward": np.zeros(1, np.float32), "done": np.zeros(1, bool),
    }  # fmt: skip
    errors: list[BaseException] = []

    def call() -> None:
        try:
            host.infer(inputs, 1)
        except BaseException as error:
            errors.append(error)

    callers = [threading.Thread(target=call) for _ in range(3)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in callers), "a caller still waits on a dead server"
    assert len(errors) == 3 and all(isinstance(e, ServerFailed) for e in errors)
    assert "ValueError('bad batch')" in str(errors[0])
    with pytest.raises(ServerFailed, match="bad batch"):
        host.infer(inputs, 1)
    with pytest.raises(ServerFailed, match="bad batch"):
        host.stats()
