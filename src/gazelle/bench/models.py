"""`gazelle bench models`: per-core speed of each torso (with the LSTM core) on CPU.

For each torso it measures, on one torch thread (`torch.set_num_threads(1)`, per-core
figures):

- acting: `Agent.act` on a batch of `B` observations, samples/s, for each batch size;
- learning: one learner step on a `[T, B]` unroll (forward `unroll` + backward + RMSProp
  step), samples/s (`T * B` per step), in float32 and/or under bf16 autocast.

The loss is a stand-in with the shape of the actor-critic loss (policy gradient, baseline,
entropy) on random targets: its own cost is small next to the network's.

Frames: Atari-sized 4x84x84 uint8 for deep, shallow and nature; 1x42x42 for universe (the
A3C starter agent's frames); a 4-vector for mlp. 6 actions.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gazelle.models import TORSOS, Agent
from gazelle.models.encoders import random_obs
from gazelle.runtime.allocator import keep_freed_memory
from gazelle.types import ObsSpec

DEFAULT_FRAMES: dict[str, tuple[int, ...]] = {
    "deep": (4, 84, 84),
    "shallow": (4, 84, 84),
    "nature": (4, 84, 84),
    "universe": (1, 42, 42),
    "mlp": (4,),
}
NUM_ACTIONS = 6
PRECISIONS = {"fp32": ("fp32",), "bf16": ("bf16",), "both": ("fp32", "bf16")}


def _seconds_per_call(fn: Callable[[], object], seconds: float, min_calls: int) -> float:
    """Mean wall time of `fn` after one warm-up call, over at least `seconds`."""
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= min_calls:
            return elapsed / calls


def _inputs(spec: ObsSpec, shape: tuple[int, ...], gen: torch.Generator) -> tuple[Any, ...]:
    """Random agent inputs of leading shape `shape` (`[B]` or `[T, B]`)."""
    obs = random_obs(spec, shape, gen)
    last_action = torch.randint(0, spec.num_actions, shape, generator=gen)  # one action set
    reward = torch.randn(shape, generator=gen)
    done = torch.rand(shape, generator=gen) < 0.002  # a rare episode end, as in practice
    return obs, last_action, reward, done


def _learner_step(
    agent: Agent,
    optimiser: torch.optim.Optimizer,
    inputs: tuple[Any, ...],
    targets: tuple[torch.Tensor, torch.Tensor],
    bf16: bool,
) -> None:
    """Forward unroll (under bf16 autocast if `bf16`), stand-in loss, backward, update."""
    obs, last_action, reward, done = inputs
    advantages, returns = targets
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out, _ = agent.unroll(obs, last_action, reward, done, agent.initial_state(done.shape[1]))
    log_probs = F.log_softmax(out.policy_logits, dim=-1)
    taken = log_probs.gather(-1, out.action.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    loss = -(taken * advantages).sum() + 0.5 * (returns - out.baseline).pow(2).sum()
    loss = loss - 0.01 * entropy.sum()
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()


def bench_torso(
    name: str,
    frame_shape: tuple[int, ...],
    batch_sizes: Sequence[int],
    unroll_length: int,
    learner_batch: int,
    seconds_per_case: float,
    precisions: Sequence[str],
    channels_last: bool | None = None,
) -> dict[str, Any]:
    """Acting and learning samples/s of one torso with the LSTM core (see module doc)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dtype = np.uint8 if len(frame_shape) == 3 else np.float32
    spec = ObsSpec(frame_shape, np.dtype(dtype), NUM_ACTIONS)
    agent = Agent(spec, torso=name)
    torso: Any = agent.torso
    if channels_last is not None:
        torso.channels_last_act = torso.channels_last_learn = channels_last
    result: dict[str, Any] = {
        "frame_shape": list(frame_shape),
        "params": sum(p.numel() for p in agent.parameters()),
        "channels_last": {
            "act": torso.channels_last_act,
            "learn": torso.channels_last_learn,
        },
        "act": {},
        "learner": {},
    }
    for batch in batch_sizes:
        obs, last_action, reward, done = _inputs(spec, (batch,), gen)
        state = agent.initial_state(batch)
        act = partial(agent.act, obs, last_action, reward, done, state)
        per_call = _seconds_per_call(act, seconds_per_case, min_calls=3)
        result["act"][str(batch)] = round(batch / per_call, 1)

    shape = (unroll_length, learner_batch)
    inputs = _inputs(spec, shape, gen)
    targets = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    optimiser = torch.optim.RMSprop(agent.parameters(), lr=4.8e-4, alpha=0.99, eps=0.1)
    for precision in precisions:
        step = partial(_learner_step, agent, optimiser, inputs, targets, precision == "bf16")
        per_step = _seconds_per_call(step, seconds_per_case, min_calls=1)
        result["learner"][precision] = round(unroll_length * learner_batch / per_step, 1)
    return result


def _header(batch_sizes: Sequence[int], precisions: Sequence[str]) -> str:
    acts = "".join(f"{f'act B={n}':>11}" for n in batch_sizes)
    learns = "".join(f"{f'learn {p}':>12}" for p in precisions)
    return f"{'torso':<9}{'frame':>9}{'params':>9}{'ch_last':>9}{acts}{learns}"


def _row(name: str, r: dict[str, Any]) -> str:
    frame = "x".join(str(d) for d in r["frame_shape"])
    acts = "".join(f"{v:>11,.0f}" for v in r["act"].values())
    learns = "".join(f"{v:>12,.0f}" for v in r["learner"].values())
    flag = "/".join("on" if r["channels_last"][use] else "off" for use in ("act", "learn"))
    return f"{name:<9}{frame:>9}{r['params'] / 1e6:>8.2f}M{flag:>9}{acts}{learns}"


def run(
    torsos: Sequence[str] = tuple(TORSOS),
    batch_sizes: Sequence[int] = (1, 16, 64),
    unroll_length: int = 20,
    learner_batch: int = 32,
    seconds_per_case: float = 1.0,
    precision: str = "both",
    channels_last: bool | None = None,
    num_threads: int = 1,
    frame_shapes: dict[str, tuple[int, ...]] | None = None,
    verbose: bool = True,
) -> dict[str, Any]:
    """Benchmarks each torso and returns (and, if `verbose`, prints) the figures.

    Args:
        torsos: names from `gazelle.models.TORSOS`.
        batch_sizes: acting batch sizes.
        unroll_length, learner_batch: the learner's `[T, B]` unroll.
        seconds_per_case: time spent per measurement, after one warm-up call.
        precision: learner precision: "fp32", "bf16" (autocast) or "both".
        channels_last: override every torso's input layout, acting and learning (None: each
            torso's measured defaults).
        num_threads: torch threads while measuring (1: per-core figures).
        frame_shapes: frame shape per torso (default `DEFAULT_FRAMES`).

    Returns:
        `{"torch", "threads", "unroll_length", "learner_batch", "results": {torso:
        {"frame_shape", "params", "channels_last", "act": {batch: samples/s},
        "learner": {precision: samples/s}}}}`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {list(PRECISIONS)}")
    unknown = [name for name in torsos if name not in TORSOS]
    if unknown:
        raise ValueError(f"unknown torso(s) {unknown}; expected some of {sorted(TORSOS)}")
    shapes = {**DEFAULT_FRAMES, **(frame_shapes or {})}
    precisions = PRECISIONS[precision]
    report: dict[str, Any] = {
        "bench": "models",
        "torch": torch.__version__,
        "threads": num_threads,
        "unroll_length": unroll_length,
        "learner_batch": learner_batch,
        "results": {},
    }
    say = print if verbose else (lambda *args, **kwargs: None)
    say(
        f"gazelle bench models: samples/s on {num_threads} torch thread(s) (per-core figures"
        f" at 1), torch {torch.__version__}; with the LSTM 256 core; learner step = unroll "
        f"T={unroll_length} B={learner_batch} + backward + RMSProp"
    )
    say(_header(batch_sizes, precisions), flush=True)
    keep_freed_memory()  # why: as in the learner and actor processes, so the figures match
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        for name in torsos:
            result = bench_torso(
                name,
                shapes[name],
                batch_sizes,
                unroll_length,
                learner_batch,
                seconds_per_case,
                precisions,
                channels_last,
            )
            report["results"][name] = result
            say(_row(name, result), flush=True)
    finally:
        torch.set_num_threads(previous_threads)
    say(json.dumps(report))
    return report


def _torsos(text: str) -> list[str]:
    """`--torsos`: comma-separated built-in torso names, at least one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in TORSOS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}; allowed: comma-separated names of {' | '.join(TORSOS)}"
        )
    return names


def _batch_sizes(text: str) -> list[int]:
    """`--batch-sizes`: comma-separated positive integers, at least one."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1 or max(sizes) > 1_000_000:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}; allowed: comma-separated integers in [1, 1000000]"
        )
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: `python -m gazelle.bench.models [--torsos deep,shallow] ...`."""
    from gazelle.config.flags import OneLineParser, number_flag

    count = number_flag(int, 1)
    parser = OneLineParser(prog="gazelle bench models", description=__doc__)
    parser.add_argument(
        "--torsos", type=_torsos, default=",".join(TORSOS), help="comma-separated names"
    )
    parser.add_argument(
        "--batch-sizes", type=_batch_sizes, default="1,16,64", help="acting batch sizes"
    )
    parser.add_argument("--unroll-length", type=count, default=20, help="learner T")
    parser.add_argument("--learner-batch", type=count, default=32, help="learner B")
    parser.add_argument(
        "--seconds-per-case",
        type=number_flag(float, 0),
        default=1.0,
        help="time per measurement, after one warm-up call (0: that one call)",
    )
    parser.add_argument("--precision", choices=list(PRECISIONS), default="both")
    parser.add_argument(
        "--channels-last",
        choices=["auto", "on", "off"],
        default="auto",
        help="input memory layout of the conv torsos (auto: each torso's measured choice)",
    )
    parser.add_argument("--threads", type=count, default=1, help="torch threads (1: per core)")
    args = parser.parse_args(argv)
    run(
        torsos=args.torsos,
        batch_sizes=args.batch_sizes,
        unroll_length=args.unroll_length,
        learner_batch=args.learner_batch,
        seconds_per_case=args.seconds_per_case,
        precision=args.precision,
        channels_last={"auto": None, "on": True, "off": False}[args.channels_last],
        num_threads=args.threads,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
