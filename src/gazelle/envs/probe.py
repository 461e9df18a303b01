"""What a run needs to know of its env spec, found once: `probe(spec) -> EnvProbe`.

One call expands the spec into its levels, resolves each distinct level once, makes one env
of each (to read its observations and actions) and reads the first level's Atari protocol.
Everything that configures a run from its env (the algorithms' `prepare`, the presets, the
layout rule, `gazelle bench`'s parts) reads the `EnvProbe` and parses the spec no more: it
makes more envs of a level with `EnvProbe.make`, and hands the actors each level's
`Resolved` target (`ActorSpec.env_target`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from gazelle.envs import registry
from gazelle.envs.registry import AtariProtocol, Resolved
from gazelle.types import ObsSpec


@dataclass(frozen=True)
class EnvProbe:
    """An env spec's facts, as a run needs them.

    Attributes:
        levels: the single specs it names (`expand_levels`), in order, repeats kept.
        obs_spec: the observations and actions every level shares.
        action_repeats: agent-step repeats (as asked, or the first level's default).
        kind: the first level's: atari, minigrid, vizdoom, dmlab or gym.
        protocol: the first level's Atari protocol (None unless Atari).
        atari_frames: the Atari preprocessing `obs_spec` was made with (None unless Atari).
        full_action_space: whether the levels were made with their family's full action
            set (asked for, or chosen because their own action sets differ).
        targets: what each distinct level resolved to (`registry.Resolved`), by level.
        make_kwargs: `make`'s keyword arguments the levels were made with.
    """

    levels: list[str]
    obs_spec: ObsSpec
    action_repeats: int
    kind: str
    protocol: AtariProtocol | None = None
    atari_frames: str | None = None
    full_action_space: bool = False
    targets: Mapping[str, Resolved] = field(default_factory=dict)
    make_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def target(self, level: str) -> Resolved:
        """What `level` (one of `levels`) resolved to (resolved now if the probe did not)."""
        found = self.targets.get(level)
        return found if found is not None else resolved(level)

    def make(self, level: str, seed: int | None = None, **overrides: Any) -> gymnasium.Env:
        """An env of `level` as the probe made it (`make_kwargs`, then `overrides`),
        without resolving the level again."""
        kwargs = {**self.make_kwargs, **overrides}
        if not kwargs.get("full_action_space"):
            kwargs.pop("full_action_space", None)  # why: the other families refuse the key
        return registry.make_resolved(self.target(level), level, seed=seed, **kwargs)

    @property
    def env_defaults(self) -> dict[str, Any]:
        """The env settings the id itself implies (its Atari protocol's), as `make`'s
        keyword arguments and the env section's fields."""
        if self.protocol is None:
            return {}
        return {
            "sticky_actions": self.protocol.sticky_actions,
            "life_loss": self.protocol.life_loss,
        }


#: Each level this process resolved, by spec: `resolved` answers again from here while the id
#: is still registered. Why: `--algo` left unset is chosen from the levels' kinds (`kinds`,
#: `gazelle.config.presets.default_algo`) before the run's config, and so its probe, exist.
_RESOLVED: dict[str, Resolved] = {}


def resolved(level: str) -> Resolved:
    """`registry.resolve(level)`, once per process while its id stays registered."""
    found = _RESOLVED.get(level)
    if found is None or (found.kind != "dmlab" and found.name not in gymnasium.registry):
        found = _RESOLVED[level] = registry.resolve(level)
    return found


def kinds(spec: str) -> set[str]:
    """The kinds of the levels of env spec `spec` (see `Resolved`), resolving each once."""
    return {resolved(level).kind for level in registry.expand_levels(spec)}


#: Kinds with a full action set that every level can be made with (`full_action_space`).
FULL_ACTION_KINDS = ("atari", "vizdoom")


class LevelsDiffer(ValueError):
    """Two levels of one spec differ in their observations or actions (one agent serves
    them all, so its input and policy head must fit every one; actions differ when their
    counts or, where the env names them, their meanings do)."""

    def __init__(self, message: str, kind: str, what: str = "observations") -> None:
        super().__init__(message)
        self.kind, self.what = kind, what


def probe(
    spec: str,
    atari_frames: str = "deepmind",
    check: Callable[[list[str]], None] | None = None,
    **make_kwargs: Any,
) -> EnvProbe:
    """The facts of env spec `spec` (one level, a comma-separated list, `dmlab30`, `doom6`).

    `make_kwargs` are `make`'s (the run's env settings); an Atari spec's envs are made with
    preprocessing `atari_frames` unless they name a `preset`. `check(levels)` runs once the
    levels are known and the first is resolved, before any env is made (which can take a
    while: a DMLab level loads for seconds). With `full_action_space` unset (None), levels
    of an Atari or ViZDoom spec whose action sets differ are made with the full set
    (`FULL_ACTION_KINDS`); False keeps each level's own set (they must then agree).

    Raises:
        LevelsDiffer: two levels differ in observations or actions.
        ValueError, KeyError, ImportError: a level gazelle cannot make.
    """
    levels = registry.expand_levels(spec, test_mode=False)
    first = resolved(levels[0])
    if check is not None:
        check(levels)
    targets = {levels[0]: first}
    protocol = None
    if first.kind == "atari":
        protocol = registry.protocol_of(first, levels[0])
        make_kwargs = {"preset": atari_frames, **make_kwargs}
    full = make_kwargs.pop("full_action_space", None)
    try:
        found = _same_levels(targets, levels, {**make_kwargs, "full_action_space": bool(full)})
    except LevelsDiffer as err:
        if full is not None or first.kind not in FULL_ACTION_KINDS or err.what != "actions":
            raise
        full = True
        joint = doom_buttons(spec) if first.kind == "vizdoom" else None
        if joint is not None:
            make_kwargs = {**make_kwargs, "buttons": joint}
        found = _same_levels(targets, levels, {**make_kwargs, "full_action_space": True})
    repeats = make_kwargs.get("num_action_repeats") or registry.repeats_for_kind(first.kind)
    frames = make_kwargs["preset"] if first.kind == "atari" else None
    for level in levels:  # why: DMLab's other levels (not made) are resolved here, cheaply
        if level not in targets:
            targets[level] = resolved(level)
    return EnvProbe(
        levels, found, repeats, first.kind, protocol, frames, bool(full), targets,
        {**make_kwargs, "full_action_space": bool(full)},
    )  # fmt: skip


def _same_levels(
    targets: dict[str, Resolved], levels: list[str], make_kwargs: dict[str, Any]
) -> ObsSpec:
    """The obs spec every distinct level shares (LevelsDiffer otherwise); each level's
    resolved target is added to `targets`."""
    if not make_kwargs["full_action_space"]:
        make_kwargs = {k: v for k, v in make_kwargs.items() if k != "full_action_space"}
    first = targets[levels[0]]
    found, actions = _level_spec(first, levels[0], make_kwargs)
    made_dmlab = first.kind == "dmlab"
    for level in list(dict.fromkeys(levels))[1:]:
        if level not in targets:
            targets[level] = resolved(level)
        # why: DMLab levels share one observation and action config by construction (a
        # `DmLabEnv`'s spaces follow its settings, not its level) and each loads for
        # seconds, so one is made; a level of any other kind is made and compared.
        if targets[level].kind == "dmlab" and made_dmlab:
            continue
        made_dmlab = made_dmlab or targets[level].kind == "dmlab"
        other, other_actions = _level_spec(targets[level], level, make_kwargs)
        if other.fields != found.fields:
            raise LevelsDiffer(
                f"levels with the same observations; {levels[0]} has {_describe(found)}, "
                f"{level} has {_describe(other)}",
                first.kind,
                "observations",
            )
        if other.actions != found.actions or actions != other_actions:
            raise LevelsDiffer(
                f"levels with the same actions; {levels[0]} has {_actions(found, actions)}, "
                f"{level} has {_actions(other, other_actions)}",
                first.kind,
                "actions",
            )
    return found


def _level_spec(
    target: Resolved, level: str, make_kwargs: dict[str, Any]
) -> tuple[ObsSpec, tuple[str, ...] | None]:
    """A level's obs spec and its actions' names (None where the env does not name them)."""
    env = registry.make_resolved(target, level, seed=0, **make_kwargs)
    try:
        names = getattr(env.unwrapped, "action_meanings", None)
        return registry.obs_spec(env), None if names is None else tuple(names)
    finally:
        env.close()


def _actions(spec: ObsSpec, names: tuple[str, ...] | None) -> str:
    return spec.actions.describe() + (f" ({', '.join(names)})" if names else "")


def doom_buttons(spec: str) -> tuple[str, ...] | None:
    """The joint buttons of a spec whose levels are all ViZDoom ids: every button any of
    them has (`gazelle.envs.doom_actions.union_buttons`, read from their `.cfg`s, no engine
    started); None for any other spec. A multi-task ViZDoom run with the full action space
    acts with these in every level."""
    levels = list(dict.fromkeys(registry.expand_levels(spec)))
    targets = [registry.resolve(level) for level in levels]
    if any(t.kind != "vizdoom" for t in targets):
        return None
    from gazelle.envs import vizdoom
    from gazelle.envs.doom_actions import union_buttons

    return union_buttons([vizdoom.scenario_buttons(t.name) for t in targets])


def _describe(spec: ObsSpec) -> str:
    return f"observations {spec.describe()}"
