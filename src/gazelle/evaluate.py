"""Test mode (`gazelle test`): run a trained agent for N episodes per level.

As the seed's test mode: the checkpoint's agent acts (sampling from its policy, or greedy on
request) in each level with the test-mode env config (DMLab: hold-out levels and the fixed
mixer seed; `dmlab30` maps to the 30 test levels); prints the mean return per level and the
human-normalised score where the levels have reference scores, and writes
`test_results.json` in the run's directory.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gazelle import checkpoint
from gazelle.config import ImpalaConfig
from gazelle.runtime.actor import ObsEncoder
from gazelle.types import INSTRUCTION

RESULTS_FILE = "test_results.json"
MAX_STEPS_PER_EPISODE = 1_000_000


def run_episodes(
    agent: Any, env: Any, episodes: int, greedy: bool, encode: ObsEncoder, seed: int
) -> list[float]:
    """Returns of `episodes` whole games of `env` (one env, batch of 1)."""
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    state = agent.initial_state(1)
    action = torch.zeros(1, dtype=torch.long)
    reward = torch.zeros(1)
    done = torch.ones(1, dtype=torch.bool)
    episode_return, steps = 0.0, 0
    with torch.inference_mode():
        while len(returns) < episodes:
            batch: dict[str, Any] = {"frame": np.asarray(obs["frame"])[None]}
            if INSTRUCTION in obs:
                batch[INSTRUCTION] = [obs[INSTRUCTION]]
            out, state = agent.step(encode(batch), action, reward, done, state, greedy=greedy)
            action = out.action
            obs, r, terminated, truncated, info = env.step(int(action[0]))
            episode_return += float(r)
            steps += 1
            reward = torch.tensor([float(r)])
            done = torch.tensor([bool(terminated or truncated)])
            if terminated or truncated:
                if info.get("game_over", True):
                    returns.append(episode_return)
                    episode_return = 0.0
                obs, _ = env.reset()
            if steps > MAX_STEPS_PER_EPISODE * episodes:
                raise RuntimeError(f"test: no episode ended in {steps} steps")
    return returns


def evaluate(
    logdir: str | Path,
    episodes: int = 10,
    greedy: bool = False,
    seed: int = 1,
    verbose: bool = True,
) -> dict[str, Any]:
    """Evaluate the checkpoint in `logdir`; returns (and writes) the results dict."""
    from gazelle.algorithms.setup import env_kwargs
    from gazelle.envs import expand_levels, make, obs_spec, scores
    from gazelle.models import Agent

    logdir = Path(logdir)
    state = checkpoint.load(logdir / "checkpoint.pt")
    config = ImpalaConfig.from_dict(state["config"])
    levels = expand_levels(config.env, test_mode=True)
    torch.manual_seed(seed)
    results: dict[str, Any] = {
        "episodes_per_level": episodes,
        "greedy": greedy,
        "frames_trained": int(state["frames"]),
        "levels": {},
    }
    agent = None
    encode = ObsEncoder(32, config.use_instruction)
    level_returns: dict[str, list[float]] = {}
    for index, level in enumerate(levels):
        env = make(level, seed=seed + index, test_mode=True, **env_kwargs(config))
        try:
            if agent is None:
                spec = obs_spec(env)
                if not config.use_instruction:
                    spec = dataclasses.replace(spec, has_instruction=False)
                agent = Agent(spec, torso=config.model, use_lstm=config.use_lstm)
                agent.load_state_dict(state["agent"])
                agent.eval()
            returns = run_episodes(agent, env, episodes, greedy, encode, seed + index)
        finally:
            env.close()
        level_returns[level] = returns
        results["levels"][level] = {
            "mean_return": float(np.mean(returns)),
            "std_return": float(np.std(returns)),
            "returns": returns,
        }
        if verbose:
            print(f"{level}: mean return {np.mean(returns):.2f} over {episodes} episodes")
    try:
        results["human_normalized_no_cap"] = scores.compute_human_normalized_score(
            level_returns, per_level_cap=None
        )
        results["human_normalized_cap_100"] = scores.compute_human_normalized_score(
            level_returns, per_level_cap=100
        )
        if verbose:
            print(
                f"human-normalised score: {results['human_normalized_no_cap']:.1f} "
                f"(capped at 100 per level: {results['human_normalized_cap_100']:.1f})"
            )
    except (KeyError, ValueError):
        pass  # levels without human/random reference scores
    (logdir / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n")
    if verbose:
        print(f"wrote {logdir / RESULTS_FILE}")
    return results
