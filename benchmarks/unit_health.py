"""The units of a trained agent, layer by layer: plays a run's checkpoint on its own env and
reads which ReLU units never fire (ELU units: input below -3 on every step) and how many
LSTM gates are saturated, next to a freshly initialised agent of the same config on the same
frames.

The training loops log the worst layer of each group on one update in ten
(`layers/dead_units/<group>`, `layers/saturated_gates/<group>`, `gazelle.runtime.
unit_health`); this names every layer, on frames the agent chose itself (docs/results.md,
"Dead units, saturated gates and an early policy collapse"):

    python benchmarks/unit_health.py /work/runs/pong-default --steps 400
    python benchmarks/unit_health.py RUN --checkpoint RUN/checkpoint.pt.prev --json

Per network: each `nn.ReLU`'s and `nn.ELU`'s dead share (`unit_health.dead_floor`), the
saturated share of each `nn.LSTM`'s gates and what drives each gate (the RMS of the input's
part, the recurrent part, the biases and the pre-activation), the RMS of the torso's output
and of the core's input, and per layer group
the gradient norm of `sum log pi(a_t) + sum V(x_t)` over the steps (how much signal reaches
each group).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gazelle import checkpoint
from gazelle.algorithms.common import agent_obs_spec, env_kwargs
from gazelle.config import Config
from gazelle.envs import expand_levels, make, obs_spec
from gazelle.evaluation import ObsEncoder
from gazelle.models import build_agent
from gazelle.runtime.unit_health import dead_floor, dead_share, saturated_gates


def play(agent: Any, env: Any, encode: ObsEncoder, steps: int, seed: int) -> dict[str, Any]:
    """`steps` agent steps of one env (sampled actions): `[T, 1, ...]` unroll inputs."""
    obs, _ = env.reset(seed=seed)
    state = agent.initial_state(1)
    action, reward = torch.zeros(1, dtype=torch.long), torch.zeros(1)
    done = torch.ones(1, dtype=torch.bool)
    rows: list[tuple[Any, ...]] = []
    with torch.inference_mode():
        for _ in range(steps):
            batch = encode({k: np.asarray(v)[None] for k, v in obs.items()})
            rows.append((batch, action, reward, done))
            out, state = agent.step(batch, action, reward, done, state)
            action = out.action
            obs, r, terminated, truncated, _ = env.step(int(action[0]))
            reward = torch.tensor([float(r)])
            done = torch.tensor([bool(terminated or truncated)])
            if terminated or truncated:
                obs, _ = env.reset()
    return {
        "obs": {k: torch.stack([row[0][k] for row in rows]) for k in rows[0][0]},
        "last_action": torch.stack([row[1] for row in rows]),
        "reward": torch.stack([row[2] for row in rows]),
        "done": torch.stack([row[3] for row in rows]),
    }


def inspect(agent: nn.Module, inputs: dict[str, Any]) -> dict[str, Any]:
    """One unroll of `agent` over `inputs`: per layer dead or saturated shares, gradients."""
    report: dict[str, Any] = {"dead_units": {}, "saturated_gates": {}}
    parts: list[dict[str, torch.Tensor]] = []
    handles = []
    for name, module in agent.named_modules():
        floor = dead_floor(module)
        if floor is not None:
            handles.append(module.register_forward_hook(
                lambda _m, _i, out, name=name, floor=floor: report["dead_units"].__setitem__(
                    name, float(dead_share(out, floor)))))  # fmt: skip
        elif isinstance(module, nn.LSTM):

            def lstm_hook(m: nn.Module, ins: Any, out: Any, name: str = name) -> None:
                assert isinstance(m, nn.LSTM)
                count, total = saturated_gates(m, ins[0], ins[1][0], out[0])
                old = report["saturated_gates"].get(name, (0, 0))
                report["saturated_gates"][name] = (old[0] + int(count), old[1] + total)
                parts.append(gate_parts(m, ins[0], ins[1][0], out[0]))

            handles.append(module.register_forward_hook(lstm_hook))
    agent.zero_grad()
    state = agent.initial_state(1)
    out, _ = agent.unroll(
        inputs["obs"], inputs["last_action"], inputs["reward"], inputs["done"], state
    )
    for handle in handles:
        handle.remove()
    report["saturated_gates"] = {k: s / n for k, (s, n) in report["saturated_gates"].items()}
    if parts:
        # why: an unroll is cut into stretches at episode starts: one call each; weight the
        # calls' mean squares by their steps.
        steps = torch.tensor([float(p.pop("steps")) for p in parts])
        weights = steps[:, None] / steps.sum()
        report["gates"] = {
            key: (torch.stack([p[key] for p in parts]) * weights).sum(0).sqrt().tolist()
            for key in parts[0]
        }
    logits, values = out.policy_logits[:, 0], out.baseline[:, 0]
    logp = F.log_softmax(logits, dim=-1)
    report["entropy"] = float(-(logp.exp() * logp).sum(-1).mean().detach())
    (logp.gather(1, out.action[:, 0, None]).sum() + values.sum()).backward()
    norms: dict[str, float] = {}
    for name, param in agent.named_parameters():
        if param.grad is not None:
            group = name.split(".", 1)[0]
            norms[group] = norms.get(group, 0.0) + float(param.grad.pow(2).sum())
    report["grad_norm"] = {group: value**0.5 for group, value in norms.items()}
    torso = getattr(agent, "torso", None)
    if torso is not None and "frame" in inputs["obs"]:
        with torch.no_grad():
            features = torso(inputs["obs"]["frame"].flatten(0, 1))
        report["torso_output_rms"] = float(features.float().pow(2).mean().sqrt())
    return report


def gate_parts(
    lstm: nn.LSTM, inputs: torch.Tensor, h0: torch.Tensor, outputs: torch.Tensor
) -> dict[str, torch.Tensor]:
    """What drives each gate (i, f, g, o) of a one-layer `lstm` call on `[T, B, I]` inputs:
    the mean squares of the input's part `x W_ih^T`, the recurrent part `h W_hh^T`, the
    biases and the pre-activation, per gate `[4]`, and of the input `x` itself (as `[4]`)."""
    w_ih, w_hh, b_ih, b_hh = (t.detach() for t in lstm.all_weights[0])
    previous = torch.cat([h0.detach(), outputs.detach()[:-1]])  # why: h before step t
    x = inputs.detach()
    from_input, from_state = x @ w_ih.T, previous @ w_hh.T  # [T, B, 4H]
    bias = (b_ih + b_hh).expand_as(from_input)

    def per_gate(z: torch.Tensor) -> torch.Tensor:
        return torch.stack([g.pow(2).mean() for g in z.chunk(4, dim=-1)])

    return {
        "input_part": per_gate(from_input),
        "state_part": per_gate(from_state),
        "bias": per_gate(bias),
        "pre_activation": per_gate(from_input + from_state + bias),
        "x": x.pow(2).mean().expand(4),
        "steps": torch.tensor(float(x.shape[0])),
    }


def measure(logdir: Path, steps: int, seed: int, path: Path | None = None) -> dict[str, Any]:
    """The trained and a fresh agent of `logdir`'s run on `steps` steps the trained one played."""
    state = checkpoint.load(path or logdir / "checkpoint.pt")
    config = Config.from_dict(state["config"])
    level = expand_levels(config.env.id, test_mode=True)[0]
    env = make(level, seed=seed, **env_kwargs(config))
    try:
        spec = agent_obs_spec(config, obs_spec(env))
        # why: an algorithm without the setting (IMPALA) feeds the core the last action and reward
        inputs_to_core = getattr(config.algorithm, "last_action_reward", True)

        def agent_of(weights: dict[str, Any] | None) -> nn.Module:
            torch.manual_seed(seed)
            agent = build_agent(spec, config.model.torso, bool(config.model.use_lstm),
                                init=config.model.init or "seed",
                                last_action_reward=inputs_to_core is not False,
                                **config.model.agent_options())  # fmt: skip
            if weights is not None:
                agent.load_state_dict(weights)
            return agent

        trained = agent_of(state["agent"])
        inputs = play(trained, env, ObsEncoder(spec), steps, seed)
    finally:
        env.close()
    return {
        "logdir": str(logdir),
        "frames_trained": int(state["frames"]),
        "level": level,
        "steps": steps,
        "trained": inspect(trained, inputs),
        "fresh": inspect(agent_of(None), inputs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logdir", type=Path)
    parser.add_argument("--steps", type=int, default=400, help="agent steps played")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--checkpoint", type=Path, help="default: LOGDIR/checkpoint.pt")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error(f"--steps: invalid value {args.steps}; allowed: 2 or more")
    report = measure(args.logdir, args.steps, args.seed, args.checkpoint)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['logdir']}: {report['frames_trained']:,} frames trained; "
          f"{report['steps']} steps of {report['level']}")  # fmt: skip
    for which in ("trained", "fresh"):
        part = report[which]
        dead = ", ".join(f"{k} {v:.2f}" for k, v in part["dead_units"].items()) or "-"
        gates = ", ".join(f"{k} {v:.2f}" for k, v in part["saturated_gates"].items()) or "-"
        grads = ", ".join(f"{k} {v:.2e}" for k, v in part["grad_norm"].items())
        print(f"  {which}: entropy {part['entropy']:.2f}, torso output rms "
              f"{part.get('torso_output_rms', float('nan')):.3f}")  # fmt: skip
        print(f"    dead units: {dead}")
        print(f"    saturated gates: {gates}")
        print(f"    gradient norms: {grads}")
        if "gates" in part:
            print(f"    core input rms {part['gates']['x'][0]:.3f}; per gate (i, f, g, o), rms:")
            for key in ("input_part", "state_part", "bias", "pre_activation"):
                row = ", ".join(f"{v:.2f}" for v in part["gates"][key])
                print(f"      {key}: {row}")


if __name__ == "__main__":
    main()
