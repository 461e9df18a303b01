"""Test mode (`gazelle test`): run a trained agent for N episodes per level.

As the seed's test mode: the checkpoint's agent acts (sampling from its policy, or greedy on
request) in each level with the test-mode env config (DMLab: hold-out levels and the fixed
mixer seed; `dmlab30` maps to the 30 test levels); prints the mean return per level and the
mean over levels of their mean returns (a multi-task run's summary) and the
human-normalised score where the levels have reference scores, and writes
`test_results.json` in the run's directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gazelle import checkpoint
from gazelle.provenance import read_provenance
from gazelle.runtime.actor import ObsEncoder
from gazelle.video import EpisodeRecorder, clip_name, save_gif

RESULTS_FILE = "test_results.json"
VIDEO_DIR = "videos"
MAX_STEPS_PER_EPISODE = 1_000_000


def run_episodes(
    agent: Any,
    env: Any,
    episodes: int,
    greedy: bool,
    encode: ObsEncoder,
    seed: int,
    recorder: EpisodeRecorder | None = None,
    level: int = 0,
) -> list[float]:
    """Returns of `episodes` whole games of `env` (one env, batch of 1); `recorder` gets the
    colour frame after every reset and step. `level`: the env's level id in the run (picks
    the value output of an agent with one per level; the actions do not depend on it)."""
    levels = torch.tensor([level])  # only the value head reads it (one of several levels')
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    if recorder is not None:
        recorder.frame(0)
    state = agent.initial_state(1)
    action = torch.zeros(1, dtype=torch.long)
    reward = torch.zeros(1)
    done = torch.ones(1, dtype=torch.bool)
    episode_return, steps = 0.0, 0
    with torch.inference_mode():
        while len(returns) < episodes:
            # why: a batch of one env: arrays get a leading axis, text becomes a list.
            batch = {k: [v] if isinstance(v, str) else np.asarray(v)[None] for k, v in obs.items()}
            out, state = agent.step(
                encode(batch), action, reward, done, state, greedy=greedy, level=levels
            )
            action = out.action
            obs, r, terminated, truncated, info = env.step(int(action[0]))
            if recorder is not None:
                recorder.frame(len(returns))  # why: before the append, so an end frame
            episode_return += float(r)
            steps += 1
            reward = torch.tensor([float(r)])
            done = torch.tensor([bool(terminated or truncated)])
            if terminated or truncated:
                if info.get("game_over", True):
                    returns.append(episode_return)
                    episode_return = 0.0
                obs, _ = env.reset()
                if recorder is not None:
                    recorder.frame(len(returns))
            if steps > MAX_STEPS_PER_EPISODE * episodes:
                raise RuntimeError(f"test: no episode ended in {steps} steps")
    return returns


def evaluate(
    logdir: str | Path,
    episodes: int = 10,
    greedy: bool = False,
    seed: int = 1,
    verbose: bool = True,
    video: int = 0,
) -> dict[str, Any]:
    """Evaluate the checkpoint in `logdir`; returns (and writes) the results dict.

    Args:
        logdir: a run's directory (its `checkpoint.pt` and config).
        episodes: whole episodes per level.
        greedy: take the argmax action instead of sampling from the policy.
        seed: seeds torch and level i's env (`seed + i`).
        verbose: print the returns, the score and where the results went.
        video: record the first `video` episodes of each level as GIFs in `logdir/videos`
            (their paths, relative to `logdir`, go into each level's `videos`).

    Returns:
        `{"levels": {level: {"mean_return", "std_return", "returns"[, "videos"]}},
        "episodes_per_level", "greedy", "frames_trained", "provenance"}`, plus
        `mean_level_return` (the mean of the levels' mean returns) with more than one
        level, `human_normalized_no_cap` / `human_normalized_cap_100` where the levels have
        reference scores; the same dict is written to `logdir/test_results.json`. A level
        that `--env` names more than once is played once.

    A torso or env registered by name (`gazelle.register_torso`, `gazelle.register_env`)
    must be registered in this process too (test mode runs here, in no child process).
    """
    from gazelle.algorithms.common import agent_obs_spec, env_kwargs
    from gazelle.algorithms.runstate import saved_config
    from gazelle.envs import default_action_repeats, expand_levels, obs_spec, scores
    from gazelle.models import build_agent

    logdir = Path(logdir)
    state = checkpoint.load(logdir / "checkpoint.pt")
    trained_by = read_provenance(logdir)
    if verbose and trained_by is not None:
        versions = ", ".join(f"{k} {v}" for k, v in trained_by["versions"].items() if v)
        commit = trained_by.get("git_commit") or "not from a git checkout"
        print(f"trained with {versions}; code {commit}")
    config = saved_config(state["config"])
    levels = expand_levels(config.env.id, test_mode=True)
    torch.manual_seed(seed)
    results: dict[str, Any] = {
        "episodes_per_level": episodes,
        "greedy": greedy,
        "frames_trained": int(state["frames"]),
        "provenance": read_provenance(logdir),
        "levels": {},
    }
    agent = None
    level_returns: dict[str, list[float]] = {}
    if video < 0:
        raise ValueError(f"--video: invalid value {video}; allowed: 0 or more episodes")
    # why: a level named twice in --env (more actors on it in training) is tested once,
    # as the level id its first place gives it (the id that place had in training).
    firsts: dict[str, int] = {}
    for index, level in enumerate(levels):
        firsts.setdefault(level, index)
    for level, index in firsts.items():
        env = _make_env(level, seed + index, env_kwargs(config), video > 0)
        recorder = EpisodeRecorder(env, min(video, episodes)) if video > 0 else None
        try:
            if agent is None:
                spec = agent_obs_spec(config, obs_spec(env))
                encode = ObsEncoder(spec)
                # why: an A3C agent's core may see the features alone (--no-last-action-reward).
                inputs = config.a3c.last_action_reward if config.algo == "a3c" else True
                # why: a multi-task PopArt agent has a value output per training level.
                head = state["agent"].get("baseline.weight")
                levels_out = 1 if head is None else int(head.shape[0])
                agent = build_agent(spec, config.model.torso, bool(config.model.use_lstm),
                                    last_action_reward=inputs is not False,
                                    num_levels=levels_out,
                                    activation=config.model.activation,
                                    subtract_background=bool(
                                        config.model.subtract_background))  # fmt: skip
                agent.load_state_dict(state["agent"])
                agent.eval()
            returns = run_episodes(
                agent, env, episodes, greedy, encode, seed + index, recorder, level=index
            )
            fps = float(env.metadata.get("render_fps", 30)) / default_action_repeats(level)
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
        if recorder is not None:
            paths = [
                save_gif(clip, logdir / VIDEO_DIR / clip_name(level, k), fps)
                for k, clip in enumerate(recorder.clips)
            ]
            results["levels"][level]["videos"] = [str(p.relative_to(logdir)) for p in paths]
            if verbose:
                print(f"{level}: wrote {', '.join(str(p) for p in paths)}")
    if len(level_returns) > 1:
        results["mean_level_return"] = scores.mean_level_return(level_returns)
        if verbose:
            print(f"mean over the {len(level_returns)} levels: {results['mean_level_return']:.2f}")
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


def _make_env(level: str, seed: int, kwargs: dict[str, Any], render: bool) -> Any:
    """The test-mode env; with `render`, one that renders colour frames (or a clear error)."""
    from gazelle.envs import make

    if not render:
        return make(level, seed=seed, test_mode=True, **kwargs)
    try:
        env = make(level, seed=seed, test_mode=True, render_mode="rgb_array", **kwargs)
    except TypeError as err:
        raise ValueError(
            f"--video: {level} cannot render frames (no render_mode='rgb_array': {err}); "
            "allowed: envs that render, e.g. Atari, MiniGrid/BabyAI, Gymnasium classic control"
        ) from err
    if getattr(env, "render_mode", None) != "rgb_array":
        env.close()
        raise ValueError(f"--video: {level} does not render rgb_array frames; allowed: --video 0")
    return env
