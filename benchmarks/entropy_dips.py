"""Every learner batch's behaviour-policy entropy in a short run, and the low ones saved.

    python benchmarks/entropy_dips.py OUT ENV FRAMES [SEED [NAME=VALUE ...]]

Trains `gazelle train --env ENV --num-actors 2` for FRAMES frames with IMPALA's loss wrapped
so that each batch writes a row to OUT/batches.jsonl (mean entropy, each unroll's, the action
counts, the reward sum, the episode ends) and the first 6 batches under 0.2 nats go to
OUT/dip-<update>.npz (frames, actions, rewards, logits). NAME=VALUE: any flat setting
(`learning_rate=3e-4`), its value read as JSON where it parses. The progress log samples one update
in ~30; this sees them all. Results: docs/results.md ("Breakout's early entropy dips").
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import numpy as np
import torch

import gazelle

build = importlib.import_module("gazelle.algorithms.impala.build")
original = build.impala_loss
LOW = 0.2
DUMPS = 6


def make_wrapper(out: str) -> Any:
    log = open(f"{out}/batches.jsonl", "w")  # noqa: SIM115 - open for the whole run
    seen = {"updates": 0, "dumped": 0}

    def wrapped(
        agent: Any, batch: dict[str, torch.Tensor], settings: Any, keep_targets: Any = None
    ) -> Any:
        loss, metrics = original(agent, batch, settings, keep_targets)
        with torch.no_grad():
            # why: behaviour logits at t+1 are the actor's at step t (the loss's shift by one)
            logp = torch.log_softmax(batch["policy_logits"][1:].float(), -1)
            entropy = -(logp.exp() * logp).sum(-1)  # [T, B]
        seen["updates"] += 1
        actions = batch["action"][1:].reshape(-1).numpy()
        row = {
            "update": seen["updates"],
            "entropy": float(entropy.mean()),
            "per_unroll": [round(float(x), 3) for x in entropy.mean(0)],
            "action_counts": np.bincount(actions, minlength=logp.shape[-1]).tolist(),
            "reward_sum": float(batch["reward"][1:].sum()),
            "episode_ends": int(batch["terminated"][1:].sum()),
        }
        log.write(json.dumps(row) + "\n")
        log.flush()
        if row["entropy"] < LOW and seen["dumped"] < DUMPS:
            seen["dumped"] += 1
            fields = ("frame", "action", "reward", "terminated", "policy_logits")
            np.savez_compressed(
                f"{out}/dip-{seen['updates']}.npz",
                entropy=entropy.numpy(),
                **{k: batch[k].numpy() for k in fields if k in batch},
            )
        return loss, metrics

    return wrapped


if __name__ == "__main__":
    out, env, frames = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    extra: dict[str, Any] = {}
    for item in sys.argv[5:]:
        name, _, value = item.partition("=")
        try:
            extra[name] = json.loads(value)
        except json.JSONDecodeError:
            extra[name] = value
    build.impala_loss = make_wrapper(out)
    config = {"env": env, "total_frames": frames, "logdir": f"{out}/run", "seed": seed, **extra}
    gazelle.train({**config, "num_actors": 2})
