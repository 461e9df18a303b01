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
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

from gazelle import checkpoint
from gazelle.config import ConfigError
from gazelle.envs.action_spaces import native_action
from gazelle.errors import RunError
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
    action_bounds: str = "clip",
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
    action = torch.from_numpy(agent.actions.zeros(1))
    # why: the agent's action (an index, or flat values) -> the env's own (`action_spaces`).
    native = native_action(env.action_space, action_bounds)
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
            obs, r, terminated, truncated, info = env.step(native(action[0].numpy()))
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
                raise RunError(
                    f"no episode ended in {steps} steps ({MAX_STEPS_PER_EPISODE:,} per episode "
                    "allowed): the env never terminates or truncates"
                )
    return returns


def evaluate(
    logdir: str | Path,
    episodes: int = 10,
    greedy: bool = False,
    seed: int = 1,
    verbose: bool = True,
    video: int = 0,
    allow_imports: Sequence[str] = (),
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
        allow_imports: modules the run's saved torso (`module:attr`) or env
            (`module:EnvId`) may import; any other module it names and that this process
            has not imported is refused (`gazelle.algorithms.imports`): a run folder is
            data, not code.

    Returns:
        `{"levels": {level: {"mean_return", "std_return", "returns"[, "videos"]}},
        "episodes_per_level", "greedy", "frames_trained", "provenance"}`, plus
        `mean_level_return` (the mean of the levels' mean returns) with more than one
        level, `human_normalized_no_cap` / `human_normalized_cap_100` where the levels have
        reference scores; the same dict is written to `logdir/test_results.json`.

    A torso or env registered by name (`gazelle.register_torso`, `gazelle.register_env`)
    must be registered in this process too (test mode runs here, in no child process).

    Raises (each one line, before any episode): `ConfigError` for a bad argument, an env
    that cannot be made here or a module the run would import unasked; `CheckpointError`
    for a checkpoint that is not a gazelle run's or whose weights do not fit its config.
    """
    from gazelle.algorithms.common import agent_obs_spec, env_kwargs
    from gazelle.algorithms.imports import check_saved
    from gazelle.envs import default_action_repeats, expand_levels, obs_spec, scores
    from gazelle.models import build_agent

    _check_arguments(episodes, seed, video)
    logdir = Path(logdir)
    path = logdir / "checkpoint.pt"
    state = checkpoint.load(path)
    config = _saved_config(state, path)
    check_saved(config, logdir, allow_imports)
    _check_writable(logdir / RESULTS_FILE)
    trained_by = read_provenance(logdir)
    if verbose and trained_by is not None:
        versions = ", ".join(f"{k} {v}" for k, v in trained_by["versions"].items() if v)
        commit = trained_by.get("git_commit") or "not from a git checkout"
        print(f"trained with {versions}; code {commit}")
    try:
        levels = expand_levels(config.env.id, test_mode=True)
    except ValueError as err:
        raise _env_error(config.env.id, err) from err
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
    for index, level in enumerate(levels):
        try:
            env = _make_env(level, seed + index, env_kwargs(config), video > 0)
        except (ValueError, ImportError, gymnasium.error.Error) as err:
            if str(err).startswith("--"):
                raise
            raise _env_error(level, err) from err
        recorder = EpisodeRecorder(env, min(video, episodes)) if video > 0 else None
        try:
            if agent is None:
                spec = agent_obs_spec(config, obs_spec(env))
                encode = ObsEncoder(spec)
                # why: an A3C agent's core may see the features alone (--no-last-action-reward);
                # an algorithm without the setting feeds it the last action and reward.
                inputs = getattr(config.algorithm, "last_action_reward", True)
                # why: a multi-task PopArt agent has a value output per training level.
                head = state["agent"].get("baseline.weight")
                levels_out = 1 if head is None else int(head.shape[0])
                try:
                    agent = build_agent(spec, config.model.torso, bool(config.model.use_lstm),
                                        last_action_reward=inputs is not False,
                                        num_levels=levels_out,
                                        **config.model.agent_options())  # fmt: skip
                    agent.load_state_dict(state["agent"])
                except (ValueError, RuntimeError, KeyError, TypeError, AttributeError) as err:
                    first = (str(err).strip().splitlines() or [""])[0][:200]
                    raise checkpoint.CheckpointError(
                        f"checkpoint {path}: its agent cannot be built from its config, or "
                        f"its weights do not fit it ({type(err).__name__}: {first})"
                    ) from err
                agent.eval()
            returns = run_episodes(
                agent,
                env,
                episodes,
                greedy,
                encode,
                seed + index,
                recorder,
                level=index,
                action_bounds=config.model.action_bounds,
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
    if len(levels) > 1:
        results["mean_level_return"] = scores.mean_level_return(level_returns)
        if verbose:
            print(f"mean over the {len(levels)} levels: {results['mean_level_return']:.2f}")
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
    try:
        (logdir / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n")
    except OSError as err:
        raise ConfigError(
            "logdir", str(logdir), "a run directory this user can write", problem=str(err)
        ) from err
    if verbose:
        print(f"wrote {logdir / RESULTS_FILE}")
    return results


def _check_arguments(episodes: int, seed: int, video: int) -> None:
    """The numbers of a test run (the CLI's parser checks them too), as `ConfigError`s."""
    from gazelle.config.validation import SEED_MAX

    for name, value, low, high in (
        ("episodes", episodes, 1, 10**9),
        ("seed", seed, 0, SEED_MAX),
        ("video", video, 0, 10**9),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(name, value, f"an integer in [{low}, {high}]")


def _saved_config(state: dict[str, Any], path: Path) -> Any:
    """The config a checkpoint holds, or `CheckpointError` (one line) for one that holds
    no gazelle run (no config, frames or weights)."""
    from gazelle.algorithms.runstate import saved_config

    missing = [key for key in ("config", "frames", "agent") if key not in state]
    if missing:
        raise checkpoint.CheckpointError(
            f"checkpoint {path} holds no {' or '.join(repr(k) for k in missing)}: not one "
            "that gazelle train wrote"
        )
    try:
        return saved_config(dict(state["config"]))
    except (ConfigError, TypeError, ValueError) as err:
        raise checkpoint.CheckpointError(
            f"checkpoint {path}: its config does not load ({err})"
        ) from err


def _check_writable(path: Path) -> None:
    """`path` (the results file) can be written: refused before any episode runs."""
    problem = None
    if path.is_dir():
        problem = f"{path} is a directory"
    elif not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        problem = f"{path} cannot be written"
    if problem is not None:
        raise ConfigError(
            "logdir", str(path.parent), "a run directory this user can write", problem=problem
        )


def _env_error(level: str, err: BaseException) -> ConfigError:
    """A trained run's env that this process cannot make (unknown here, registered only in
    the process that trained it, or missing its package)."""
    first = (str(err).strip().splitlines() or [""])[0][:300]
    return ConfigError(
        "logdir",
        level,
        "a run whose env this process can make (register or install it here first)",
        problem=f"the run's env {level!r} cannot be made here ({first})",
    )


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
