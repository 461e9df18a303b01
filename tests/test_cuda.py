"""The CUDA paths: the learner's update, bf16 autocast, the prefetcher's pinned copies, the
central inference server on the GPU, and a short run where `--inference auto` picks central.

Skipped without CUDA (this project's CI has none); `benchmarks/gpu_check.sh` runs them on a
GPU machine. Each compares the GPU against the CPU, so a wrong device path fails.
"""

from __future__ import annotations

import copy
import functools
import json
import threading

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from gazelle.algorithms.impala.loss import LossSettings, impala_loss
from gazelle.backends.local.inference import (
    InferenceChannels,
    InferenceServer,
    SharedMemoryInferenceClient,
)
from gazelle.backends.local.params import ParamStore
from gazelle.config import Config
from gazelle.models import Agent
from gazelle.runtime.learner import Learner, Prefetcher
from gazelle.runtime.policy import CentralPolicy, LocalPolicy
from test_learner import SPEC, make_batch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
CUDA = torch.device("cuda")
SETTINGS = LossSettings(0.99, 0.5, 0.01, "abs_one")


def central_policy(channels, actor_id, num_envs, should_stop=lambda: False, timeout_s=120.0):
    """A `CentralPolicy` over actor `actor_id`'s shared-memory client."""
    client = SharedMemoryInferenceClient(channels, actor_id, should_stop, timeout_s)
    return CentralPolicy(client, num_envs)


def _learner(agent, device, precision="fp32"):
    optimizer = torch.optim.SGD(agent.parameters(), lr=0.1)
    loss_fn = functools.partial(impala_loss, settings=SETTINGS)
    return Learner(agent, optimizer, loss_fn, device, precision, grad_norm_clip=40.0)


def test_one_update_on_cuda_equals_the_cpu_update():
    torch.manual_seed(0)
    cpu_agent = Agent(SPEC, torso="mlp", use_lstm=True, core_size=8)
    gpu_agent = copy.deepcopy(cpu_agent).to(CUDA)
    batch, _ = make_batch(cpu_agent, terminated_at=[(3, 1)], truncated_at=[(2, 2)])
    cpu_metrics = _learner(cpu_agent, torch.device("cpu")).step(batch, 0.05)
    gpu_batch = {k: v.to(CUDA) for k, v in batch.items()}
    gpu_metrics = _learner(gpu_agent, CUDA).step(gpu_batch, 0.05)
    for (name, cpu_param), gpu_param in zip(cpu_agent.named_parameters(), gpu_agent.parameters()):
        assert gpu_param.device.type == "cuda", name
        torch.testing.assert_close(gpu_param.cpu(), cpu_param, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        gpu_metrics["losses/total"].cpu(), cpu_metrics["losses/total"], rtol=1e-4, atol=1e-4
    )


def test_bf16_update_on_cuda_is_finite_and_close_to_fp32():
    torch.manual_seed(1)
    agent = Agent(SPEC, torso="mlp", use_lstm=True, core_size=8).to(CUDA)
    batch, _ = make_batch(agent.cpu())
    agent.to(CUDA)
    batch = {k: v.to(CUDA) for k, v in batch.items()}
    reference = copy.deepcopy(agent)
    bf16 = _learner(agent, CUDA, "bf16").step(batch, 0.0)  # lr 0: the loss alone
    fp32 = _learner(reference, CUDA).step(batch, 0.0)
    assert torch.isfinite(bf16["losses/total"])
    torch.testing.assert_close(bf16["losses/total"], fp32["losses/total"], rtol=0.05, atol=0.05)


def test_prefetcher_delivers_batches_on_the_gpu():
    batches = [{"x": torch.full((4, 3), float(i))} for i in range(3)]

    def make_batches(should_stop):
        yield from batches

    prefetcher = Prefetcher(make_batches, CUDA)
    try:
        for i in range(3):
            got = prefetcher.get(timeout=30.0)["x"]
            assert got.device.type == "cuda"
            torch.testing.assert_close(got.cpu(), batches[i]["x"])
    finally:
        prefetcher.close()


def test_central_inference_on_the_gpu_matches_local_cpu_inference():
    ctx = mp.get_context("spawn")
    envs = 3
    torch.manual_seed(2)
    agent = Agent(SPEC, torso="mlp", use_lstm=True, core_size=8)
    params = ParamStore(agent, ctx)
    params.publish(agent, 0)
    channels = InferenceChannels(SPEC, 1, envs, 8, ctx)
    stop = threading.Event()
    server = InferenceServer(channels, copy.deepcopy(agent), params, CUDA, stop, max_wait_s=0.002)
    server.start()
    try:
        local = LocalPolicy(copy.deepcopy(agent), params, envs)
        # why: the server thread records its error and the client only sees silence, so a
        # short timeout, then the error, says what broke.
        central = central_policy(channels, 0, envs, timeout_s=10.0)
        local.begin_unroll()
        central.begin_unroll()
        rng = np.random.default_rng(0)
        for step in range(6):
            obs = {"frame": torch.from_numpy(rng.standard_normal((envs, 4)).astype(np.float32))}
            action = torch.from_numpy(rng.integers(0, 2, envs))
            reward = torch.from_numpy(rng.standard_normal(envs).astype(np.float32))
            done = torch.from_numpy(rng.random(envs) < 0.3) | (step == 0)
            want = local.step(obs, action, reward, done)
            try:
                got = central.step(obs, action, reward, done)
            except TimeoutError:
                pytest.fail(f"inference server: {server.error}")
            assert got.policy_logits.device.type == "cpu"
            torch.testing.assert_close(got.policy_logits, want.policy_logits, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(got.baseline, want.baseline, rtol=1e-4, atol=1e-5)
    finally:
        stop.set()
        server.close()


def test_training_on_cuda_picks_central_inference(tmp_path):
    from gazelle.algorithms.impala import train

    config = Config.of(
        env="CartPole-v1",
        num_actors=2,
        envs_per_actor=2,
        batch_size=4,
        unroll_length=10,
        total_frames=4000,
        log_interval_s=0.5,
        checkpoint_interval_s=1000.0,
        device="auto",
        logdir=str(tmp_path),
    )
    result = train(config)
    assert result.frames >= 4000 and result.episodes > 0 and result.actor_restarts == 0
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["actors"]["inference"] == "central"
    state = torch.load(tmp_path / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert state["frames"] >= 4000
