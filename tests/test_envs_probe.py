"""`gazelle.envs.probe`: an env spec's facts, each level resolved once, read by `prepare`."""

from __future__ import annotations

import sys

import pytest

from gazelle.algorithms.common import prepare
from gazelle.config import Config, ConfigError
from gazelle.envs import registry
from gazelle.envs.probe import EnvProbe, LevelsDiffer, probe


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every spec `gazelle.envs.registry.resolve` is asked about, in order (from a process
    that has resolved none: the probe keeps what it resolved)."""
    import gazelle.envs.probe as probe_module

    monkeypatch.setattr(probe_module, "_RESOLVED", {})
    calls: list[str] = []
    real = registry.resolve

    def counting(spec: str) -> registry.Resolved:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(registry, "resolve", counting)
    return calls


def test_an_atari_spec_gives_levels_kind_protocol_defaults_and_frames(resolved):
    found = probe("ALE/Breakout-v5,ALE/Pong-v5,ALE/Breakout-v5", full_action_space=True)
    assert isinstance(found, EnvProbe)
    assert found.levels == ["ALE/Breakout-v5", "ALE/Pong-v5", "ALE/Breakout-v5"]
    assert (found.kind, found.action_repeats, found.atari_frames) == ("atari", 4, "deepmind")
    assert found.obs_spec.frame_shape == (4, 84, 84) and found.obs_spec.num_actions == 18
    assert found.protocol is not None and found.protocol.name == "v5"
    assert found.env_defaults == {"sticky_actions": True, "life_loss": False}
    assert resolved == ["ALE/Breakout-v5", "ALE/Pong-v5"]  # each distinct level once


def test_a_classic_id_with_another_preprocessing():
    found = probe("PongNoFrameskip-v4", atari_frames="universe")
    assert found.atari_frames == "universe" and found.obs_spec.frame_shape == (1, 42, 42)
    assert found.env_defaults == {"sticky_actions": False, "life_loss": True}
    given = probe("PongNoFrameskip-v4", atari_frames="universe", preset="deepmind")
    assert given.atari_frames == "deepmind"  # a preset given wins


def test_a_vector_spec_has_no_protocol():
    found = probe("CartPole-v1", num_action_repeats=2)
    assert (found.kind, found.action_repeats, found.protocol, found.atari_frames) == (
        "gym",
        2,
        None,
        None,
    )
    assert found.env_defaults == {} and found.obs_spec.frame_shape == (4,)


def test_levels_that_differ_say_how():
    with pytest.raises(LevelsDiffer, match=r"4 actions \(NOOP, FIRE.*6 actions") as err:
        probe("ALE/Breakout-v5,ALE/Pong-v5", full_action_space=False)
    assert (err.value.kind, err.value.what) == ("atari", "actions")
    with pytest.raises(LevelsDiffer, match=r"same observations") as err:
        probe("CartPole-v1,Acrobot-v1")
    assert err.value.what == "observations"


def test_levels_whose_actions_differ_get_the_full_action_set_unless_told_not_to():
    found = probe("ALE/Breakout-v5,ALE/Pong-v5")
    assert found.full_action_space and found.obs_spec.num_actions == 18
    same = probe("ALE/Pong-v5,PongNoFrameskip-v4")
    assert not same.full_action_space and same.obs_spec.num_actions == 6


def test_games_with_as_many_actions_but_other_ones_differ():
    """Equal counts are not enough: the actions' meanings must agree too."""
    with pytest.raises(LevelsDiffer, match="same actions"):
        probe("ALE/Pong-v5,ALE/Qbert-v5", full_action_space=False)


def test_prepare_resolves_the_spec_once(resolved, monkeypatch, tmp_path):
    expanded: list[str] = []
    expand = registry.expand_levels
    monkeypatch.setattr(
        registry, "expand_levels", lambda spec, **kw: expanded.append(spec) or expand(spec, **kw)
    )
    config = Config.of(env="PongNoFrameskip-v4", num_actors=1, logdir=str(tmp_path / "run"))
    config, found, _ = prepare(config)
    assert resolved == ["PongNoFrameskip-v4"] and expanded == ["PongNoFrameskip-v4"]
    # what the presets read from the probe: the family and the id's protocol
    assert config.env.atari_frames == "deepmind" and config.model.torso == "shallow"
    assert (config.env.sticky_actions, config.env.life_loss) == (False, True)
    assert found.levels == ["PongNoFrameskip-v4"]


def test_a_run_resolves_each_level_once_from_the_cli_to_the_actors(resolved, tmp_path):
    """`gazelle train` without --algo picks the algorithm from the levels' kinds, then the
    run probes them, measures the layout and hands each actor its level: one resolution of
    each level in all (the actors get the probe's `Resolved`)."""
    from gazelle.algorithms.impala.build import actor_specs
    from gazelle.cli import build_parser, config_from_args
    from gazelle.runtime.env_group import make_env_batch

    argv = ["train", "--env", "CartPole-v1,gazelle/Catch-v0", "--logdir", str(tmp_path)]
    config = config_from_args(build_parser().parse_args(argv))
    assert config.algo == "impala" and resolved == ["CartPole-v1", "gazelle/Catch-v0"]
    with pytest.raises(ConfigError, match="levels with the same observations"):
        prepare(config)  # why: two kinds of observations; only one level's facts are needed
    config = config.replace(env="CartPole-v1", num_actors=None, envs_per_actor=2)
    config, found, _ = prepare(config)  # the layout is measured: its env is the probe's
    specs = actor_specs(config, found)
    assert [spec.env_target for spec in specs] == [found.target("CartPole-v1")] * len(specs)
    make_env_batch(specs[0]).close()
    assert resolved == ["CartPole-v1", "gazelle/Catch-v0"]


def test_too_few_actors_are_named_before_any_env_is_made(tmp_path, monkeypatch):
    # why: without DMLab making a level fails, so the actors' check must come first
    monkeypatch.setitem(sys.modules, "deepmind_lab", None)
    config = Config.of(env="dmlab30", num_actors=2, logdir=str(tmp_path / "run"))
    with pytest.raises(ConfigError, match="at least 30, one actor per level of --env dmlab30"):
        prepare(config)
    seen: list[list[str]] = []
    with pytest.raises(ImportError, match="deepmind_lab"):
        probe("dmlab30", check=seen.append)
    assert len(seen) == 1 and len(seen[0]) == 30
