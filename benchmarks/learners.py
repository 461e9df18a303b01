"""Learner samples/s with `--learners N` (docs/performance.md, "Several learners"): the run's
own learners (rank 0 here, ranks 1..N-1 spawned and joined as in a run) step on synthetic
batches of the env's observation shape for a fixed time, no actors; a sample is one agent
step of one unroll (T x B per update). Every N is measured in this one process, in turn.

    python benchmarks/learners.py --env CartPole-v1 --learners 1 2 --seconds 20
    python benchmarks/learners.py --env PongNoFrameskip-v4 --model shallow --batch-size 32
    python benchmarks/learners.py --env PongNoFrameskip-v4 --model deep --device cuda --learners 1 2

With `--device cuda` learner r runs on cuda:r (NCCL between them, one GPU each: N is at most
the GPUs there are); `benchmarks/gpu_check.sh` measures N = 1..k on a GPU machine of k GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch

from gazelle.algorithms.common import prepare
from gazelle.algorithms.impala import ranks
from gazelle.algorithms.impala.build import make_learner, new_agent, vtrace_loss
from gazelle.algorithms.impala.passes import train_on_batch
from gazelle.config import Config


def synthetic_batch(agent: torch.nn.Module, steps: int, size: int) -> dict[str, torch.Tensor]:
    """A `[T+1, B]` batch of the agent's observation fields (images as uint8)."""
    spec: object = getattr(agent, "obs_spec")  # noqa: B009
    batch: dict[str, torch.Tensor] = {}
    for name in spec.names:  # type: ignore[attr-defined]
        field = spec.field(name)  # type: ignore[attr-defined]
        shape = (steps + 1, size, *field.shape)
        if field.dtype.kind == "u":
            batch[name] = torch.randint(0, 255, shape, dtype=torch.uint8)
        elif field.dtype.kind == "i":
            batch[name] = torch.zeros(shape, dtype=torch.int64)
        else:
            batch[name] = torch.randn(shape)
    actions = int(spec.num_actions)  # type: ignore[attr-defined]
    batch.update(
        action=torch.randint(0, actions, (steps + 1, size)),
        reward=torch.randn(steps + 1, size),
        terminated=torch.zeros(steps + 1, size, dtype=torch.bool),
        truncated=torch.zeros(steps + 1, size, dtype=torch.bool),
        truncation_value=torch.zeros(steps + 1, size),
        policy_logits=torch.zeros(steps + 1, size, actions),
        policy_version=torch.zeros(size, dtype=torch.int64),
        level_id=torch.zeros(size, dtype=torch.int64),
    )
    state = agent.initial_state(size)  # type: ignore[operator]
    if state:
        batch["state_h"], batch["state_c"] = state
    return batch


def measure(
    flags: dict[str, object], learners: int, seconds: float, cores: int, device_name: str = "cpu"
) -> dict[str, float | str]:
    """Samples/s of `learners` learners stepping on one batch again and again, `cores`
    torch threads in all (each learner 1/N of them, as in a run), on `device_name` (cuda:
    learner r on GPU r)."""
    with tempfile.TemporaryDirectory() as logdir:
        values = {**flags, "learners": learners, "logdir": logdir, "device": device_name}
        config, found, device = prepare(Config.from_flat(values))
        threads = torch.get_num_threads()
        torch.set_num_threads(cores)
        agent = new_agent(config, found.obs_spec, 1, device)
        group = ranks.start(config, found, device) if learners > 1 else None
        try:
            collective = group.collective if group is not None else None
            learner = make_learner(config, agent, device, None, vtrace_loss, collective)
            if collective is not None:
                ranks.send_start(collective, agent, learner.optimizer)
            run = type("Run", (), {"learner": learner, "passes": (1, 1)})()
            steps, size = int(config.algorithm.unroll_length), int(config.algorithm.batch_size)
            batch = synthetic_batch(agent, steps, size)
            batch = {key: value.to(device) for key, value in batch.items()}
            train_on_batch(run, batch, 1e-4)  # why: warm-up (allocations, first kernels)
            sync(device)
            updates, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                train_on_batch(run, batch, 1e-4)
                updates += 1
            sync(device)  # why: CUDA kernels run ahead of the host; count the finished work
            took = time.perf_counter() - start
        finally:
            if group is not None:
                group.close()
            torch.set_num_threads(threads)
    return {
        "learners": learners,
        "updates_per_s": updates / took,
        "samples_per_s": updates * steps * size / took,
        "threads_per_learner": max(1, cores // learners),
        "device": str(device),
    }


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--model", default="auto")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--unroll-length", type=int, default=20)
    parser.add_argument("--learners", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="cpu", help="cpu | cuda (learner r on cuda:r)")
    parser.add_argument("--precision", default="fp32", help="fp32 | bf16 (the learner's autocast)")
    args = parser.parse_args()
    flags = {
        "env": args.env, "model": args.model, "batch_size": args.batch_size,
        "unroll_length": args.unroll_length, "num_actors": 1, "precision": args.precision,
    }  # fmt: skip
    for learners in args.learners:
        row = measure(flags, learners, args.seconds, args.cores, args.device)
        print(json.dumps({**flags, **row}), flush=True)


if __name__ == "__main__":
    main()
