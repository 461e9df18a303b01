"""`make(spec)`: one entry point for every env gazelle runs.

A spec is one of:

- `dmlab:<level>`: a DeepMind Lab level (`gazelle.envs.dmlab`);
- an ALE id (`ALE/Pong-v5`, `PongNoFrameskip-v4`, or a short name `Pong`): Atari with
  DeepMind preprocessing (`gazelle.envs.atari`);
- a MiniGrid/BabyAI id (`BabyAI-GoToRedBall-v0`): instruction + symbolic frame
  (`gazelle.envs.babyai`);
- a ViZDoom id (`VizdoomBasic-v1`; needs `vizdoom`, extra `.[doom]`): screen + game
  variables (`gazelle.envs.vizdoom`);
- any other Gymnasium id (`CartPole-v1`, `gazelle/Memory-v0`), including third-party ones
  as `module:EnvId` (the module is imported first, as Gymnasium does) or `module/EnvId`.

`dmlab30`, `doom6` and comma-separated lists name several levels: `expand_levels` turns
them into single specs. The families (Atari, MiniGrid, ViZDoom) take `preset="raw"`: the
Gymnasium env as registered, through the generic adapter (`gazelle.envs.adapter`).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

import gymnasium

from gazelle.envs import diagnostic, vizdoom
from gazelle.envs.adapter import GymAdapter
from gazelle.envs.dmlab30 import TEST_LEVELS, TRAIN_LEVELS
from gazelle.envs.flicker import Flicker
from gazelle.envs.spaces import obs_spec_of
from gazelle.types import ObsSpec

DMLAB_PREFIX = "dmlab:"
DMLAB30 = "dmlab30"
DOOM6 = "doom6"
_ALE_ENTRY_POINT = "ale_py.env:AtariEnv"


class NotApplicable(ValueError):
    """An env setting given for an env it does not apply to; `setting` names it, the
    message says what is allowed."""

    def __init__(self, setting: str, allowed: str) -> None:
        super().__init__(f"{setting}: {allowed}")
        self.setting, self.allowed = setting, allowed


@dataclass(frozen=True)
class Resolved:
    """What a single spec names: `kind` is atari, minigrid, vizdoom, dmlab or gym; `name`
    the id, ROM or level; `module` the module imported to register the id (a
    `module:EnvId` or `module/EnvId` spec), which `make_resolved` imports again in a process
    that has not (an actor's)."""

    kind: str
    name: str
    module: str | None = None


def _register_known() -> None:
    """Register the ALE, MiniGrid and gazelle ids (idempotent, cheap after the first call)."""
    import ale_py
    import minigrid  # noqa: F401  (registers MiniGrid/BabyAI ids on import)

    gymnasium.register_envs(ale_py)
    diagnostic.register()


def _import_module(name: str, spec: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError as error:
        raise ValueError(f"env spec {spec!r}: cannot import module {name!r} ({error})") from error


def imports_of(spec: str) -> list[str]:
    """The modules that making `spec` (any spec `expand_levels` takes) would import and
    that are not imported yet: the `module` of `module:EnvId`, the namespace of
    `module/EnvId` when Gymnasium does not know that id. Imports nothing but gazelle's own
    env families (Atari, MiniGrid)."""
    _register_known()
    needed: list[str] = []
    for part in expand_levels(spec):
        if part.startswith(DMLAB_PREFIX):
            continue
        env_id = part.strip()
        if ":" in env_id:
            module, env_id = env_id.split(":", 1)
            needed.append(module)
        namespace = env_id.split("/", 1)[0] if "/" in env_id else ""
        # why: `resolve` imports a namespace it can find; find_spec of a dotted name would
        # import its parent, so a dotted one counts without asking.
        if (
            env_id not in gymnasium.registry
            and namespace
            and ("." in namespace or importlib.util.find_spec(namespace) is not None)
        ):
            needed.append(namespace)
    return [m for m in dict.fromkeys(needed) if m and m not in sys.modules]


def resolve(spec: str) -> Resolved:
    """Find what `spec` names, importing a `module:` prefix first.

    Raises:
        ValueError: an unknown id (with close matches), a multi-level spec, or a module that
            cannot be imported.
    """
    spec = spec.strip()
    if spec in (DMLAB30, DOOM6) or "," in spec:
        raise ValueError(f"{spec!r} names several levels; use expand_levels() first")
    if spec.startswith(DMLAB_PREFIX):
        level = spec[len(DMLAB_PREFIX) :]
        if not level:
            raise ValueError("empty DMLab level name in 'dmlab:'")
        return Resolved("dmlab", level)
    _register_known()
    env_id, imported = spec, None
    if ":" in env_id:
        imported, env_id = env_id.split(":", 1)
        _import_module(imported, spec)
    if env_id not in gymnasium.registry and "/" in env_id:
        namespace, rest = env_id.split("/", 1)
        if importlib.util.find_spec(namespace) is not None:
            _import_module(namespace, spec)
            imported = imported or namespace
            if env_id not in gymnasium.registry and rest in gymnasium.registry:
                env_id = rest
    if env_id not in gymnasium.registry and f"ALE/{env_id}-v5" in gymnasium.registry:
        env_id = f"ALE/{env_id}-v5"
    vizdoom_id = env_id not in gymnasium.registry and env_id.startswith("Vizdoom")
    if vizdoom_id and not vizdoom.register_ids():
        raise ValueError(
            f"{spec!r} is a ViZDoom id: install ViZDoom first (pip install 'gazelle[doom]')"
        )
    if env_id not in gymnasium.registry:
        candidates = [*gymnasium.registry, DMLAB30, DOOM6]
        close = difflib.get_close_matches(env_id, candidates, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown environment {spec!r}{hint} (a Gymnasium id, 'module:EnvId' for a "
            "third-party id, 'dmlab:<level>' or 'dmlab30')"
        )
    entry = gymnasium.spec(env_id).entry_point
    if entry == _ALE_ENTRY_POINT:
        return Resolved("atari", env_id, imported)
    if isinstance(entry, str) and entry.startswith("minigrid."):
        return Resolved("minigrid", env_id, imported)
    if entry == vizdoom.ENTRY_POINT:
        return Resolved("vizdoom", env_id, imported)
    return Resolved("gym", env_id, imported)


def make(
    spec: str,
    *,
    seed: int | None = None,
    num_action_repeats: int | None = None,
    sticky_actions: bool | None = None,
    life_loss: bool | None = None,
    test_mode: bool = False,
    render_mode: str | None = None,
    **kwargs: Any,
) -> gymnasium.Env:
    """Make the env a spec names, wrapped to gazelle's observation and action contract.

    Args:
        spec: see the module docstring.
        seed: seeds the first `reset()` (later resets continue the same random stream).
        num_action_repeats: agent-step repeats (Atari frame skip, DMLab `num_steps`);
            `default_action_repeats(spec)` when None.
        sticky_actions: Atari only: repeat_action_probability 0.25; None: the id's protocol
            (`atari_protocol`).
        life_loss: Atari only: a lost life ends the episode (not the game); None: the id's
            protocol. Never in test mode, which plays the full game.
        test_mode: DMLab: hold-out levels and the evaluation mixer seed; Atari: the full
            game (no life loss).
        render_mode: passed to the env (`rgb_array` for Atari).
        **kwargs: env-specific settings: Atari `preset` ("deepmind", "universe" or "raw":
            the Gymnasium env as registered) and overrides (`noop_max`, `max_frames`,
            `frame_size`, ...); MiniGrid and ViZDoom `preset="raw"` (the generic adapter);
            ViZDoom `resolution`, `frame_size`, `frame_stack`, `full_action_space`,
            `doom_actions`, `buttons`, `delta_bins` (`gazelle.envs.vizdoom.make_doom`); DMLab
            `width`, `height`, `dataset_path`, `level_cache_dir`, ...; otherwise the
            Gymnasium id's own keyword arguments; for an env read by the generic adapter,
            `image_layout` (auto | hwc | chw: `gazelle.envs.observations`); in every family,
            `obs_flicker` (a probability: each observation blanked with it,
            `gazelle.envs.flicker`; 0: off).
    """
    return make_resolved(
        resolve(spec),
        spec,
        seed=seed,
        num_action_repeats=num_action_repeats,
        sticky_actions=sticky_actions,
        life_loss=life_loss,
        test_mode=test_mode,
        render_mode=render_mode,
        **kwargs,
    )


def make_resolved(
    target: Resolved,
    spec: str,
    *,
    seed: int | None = None,
    obs_flicker: float = 0.0,
    **kwargs: Any,
) -> gymnasium.Env:
    """`make(spec)` for a spec already resolved to `target` (not resolved again: its ids are
    registered, cheaply after the first time, as `resolve` found them)."""
    env = _make_family(target, spec, seed=seed, **kwargs)
    return Flicker(env, obs_flicker, seed) if obs_flicker else env


def _make_family(
    target: Resolved,
    spec: str,
    *,
    seed: int | None = None,
    num_action_repeats: int | None = None,
    sticky_actions: bool | None = None,
    life_loss: bool | None = None,
    test_mode: bool = False,
    render_mode: str | None = None,
    **kwargs: Any,
) -> gymnasium.Env:
    """The env of `make_resolved`, in its family's form, before any wrapper of all families."""
    if target.kind != "dmlab":
        # why: in a process that never resolved the spec (an actor's), Gymnasium's registry
        # lacks the ids that `resolve` registers or imports.
        _register_known()
        if target.module is not None:
            _import_module(target.module, spec)
        if target.kind == "vizdoom":
            vizdoom.register_ids()
    repeats = num_action_repeats or repeats_for_kind(target.kind)
    image_layout = kwargs.pop("image_layout", "auto")
    if image_layout != "auto" and _own_preprocessing(target, kwargs):
        raise NotApplicable(
            "image_layout",
            f"auto with {spec} (its frames are gazelle's own; hwc and chw are for envs read "
            "by the generic adapter: Gymnasium ids, --raw-obs)",
        )
    if target.kind != "atari" and (sticky_actions or life_loss):
        raise ValueError(f"sticky_actions and life_loss apply to Atari only, not {spec!r}")
    if target.kind != "vizdoom" and kwargs.get("doom_actions") is not None:
        raise ValueError(f"doom_actions applies to ViZDoom ids only, not {spec!r}")
    if target.kind == "atari":
        protocol = protocol_of(target)
        sticky_actions = protocol.sticky_actions if sticky_actions is None else sticky_actions
        life_loss = protocol.life_loss if life_loss is None else life_loss
        life_loss = life_loss and not test_mode
        kwargs.setdefault("fire_reset", protocol.fire_reset)
    if target.kind == "dmlab":
        from gazelle.envs.dmlab import DmLabEnv

        return DmLabEnv(
            target.name, num_action_repeats=repeats, test_mode=test_mode, seed=seed, **kwargs
        )
    if target.kind == "atari" and kwargs.get("preset", "deepmind") != "raw":
        from gazelle.envs.atari import make_atari

        game = gymnasium.spec(target.name).kwargs["game"]
        return make_atari(
            game,
            frame_skip=repeats,
            sticky_actions=bool(sticky_actions),
            life_loss=bool(life_loss),
            seed=seed,
            render_mode=render_mode,
            **kwargs,
        )
    if target.kind == "vizdoom" and kwargs.get("preset") != "raw":
        return vizdoom.make_doom(
            target.name, num_action_repeats=repeats, seed=seed, render_mode=render_mode, **kwargs
        )
    if target.kind == "minigrid" and kwargs.get("preset") != "raw":
        from gazelle.envs.babyai import make_babyai

        return make_babyai(
            target.name, seed=seed, num_action_repeats=repeats, render_mode=render_mode, **kwargs
        )
    kwargs.pop("preset", None)
    kwargs.pop("fire_reset", None)
    if target.kind == "vizdoom":
        kwargs = vizdoom.raw_kwargs(target.name, kwargs)
    if target.kind != "atari" and kwargs.pop("full_action_space", False):
        raise ValueError(f"full_action_space applies to Atari and ViZDoom, not {spec!r}")
    if target.kind == "atari":
        # why: the raw ALE env applies its own frameskip; repeat each action only once more.
        repeats = num_action_repeats or 1
        if sticky_actions:
            kwargs.setdefault("repeat_action_probability", 0.25)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    env = gymnasium.make(target.name, **kwargs)
    return GymAdapter(env, num_action_repeats=repeats, seed=seed, image_layout=image_layout)


def _own_preprocessing(target: Resolved, kwargs: dict[str, Any]) -> bool:
    """Whether `make_resolved` makes `target` with its family's own frames (not through
    the generic adapter)."""
    preset = kwargs.get("preset")
    if target.kind == "atari":
        return preset != "raw"
    return target.kind == "dmlab" or (target.kind in ("vizdoom", "minigrid") and preset != "raw")


@dataclass(frozen=True)
class AtariProtocol:
    """How an Atari id is played, as its users know it.

    - classic (`*NoFrameskip-v4`, every `-v4` id): the DeepMind protocol of the DQN and
      IMPALA papers: no sticky actions, up to 30 no-op starts, FIRE on reset where the game
      has it, a lost life ends the training episode (test mode plays the full game);
    - v5 (`ALE/*-v5`): ale-py's revisited protocol (Machado et al., 2018): sticky actions
      with probability 0.25, no life-loss signal, no FIRE on reset, up to 30 no-op starts.

    The `repeat_action_probability` registered for the id decides `sticky_actions`.
    """

    name: str
    sticky_actions: bool
    life_loss: bool
    fire_reset: bool


def atari_protocol(spec: str) -> AtariProtocol:
    """The protocol of an Atari spec (see `AtariProtocol`); ValueError for a non-Atari one."""
    return protocol_of(resolve(spec), spec)


def protocol_of(target: Resolved, spec: str | None = None) -> AtariProtocol:
    """The protocol of a resolved Atari id; ValueError for a non-Atari one."""
    if target.kind != "atari":
        raise ValueError(f"{spec or target.name!r} is not an Atari id")
    registered = gymnasium.spec(target.name)
    sticky = float(registered.kwargs.get("repeat_action_probability", 0.0)) > 0.0
    classic = (registered.version or 0) < 5
    return AtariProtocol("classic" if classic else "v5", sticky, classic, classic)


def default_action_repeats(spec: str) -> int:
    """Agent-step repeats of a spec: 4 for Atari (frame skip), ViZDoom (tics) and DMLab, 1
    otherwise."""
    spec = spec.strip()
    if spec in (DMLAB30, DOOM6) or spec.startswith(DMLAB_PREFIX):
        return 4
    return repeats_for_kind(resolve(spec).kind)


def repeats_for_kind(kind: str) -> int:
    """Agent-step repeats of a resolved spec's kind (see `default_action_repeats`)."""
    return 4 if kind in ("atari", "dmlab", "vizdoom") else 1


def expand_levels(spec: str, test_mode: bool = False) -> list[str]:
    """Split a comma-separated spec into single specs; `dmlab30` becomes the 30 DMLab-30
    training (or, in test mode, test) levels as `dmlab:<level>` specs, `doom6` the six
    ViZDoom scenarios of `gazelle.envs.vizdoom.DOOM6`."""
    levels: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part == DMLAB30:
            levels.extend(
                DMLAB_PREFIX + name for name in (TEST_LEVELS if test_mode else TRAIN_LEVELS)
            )
        elif part == DOOM6:
            levels.extend(vizdoom.DOOM6)
        else:
            levels.append(part)
    if not levels:
        raise ValueError(f"no environment in spec {spec!r}")
    return levels


def obs_spec(env: gymnasium.Env) -> ObsSpec:
    """The `ObsSpec` of an env made by `make` (a Dict in gazelle's form, Discrete actions:
    `gazelle.envs.spaces`)."""
    if not isinstance(env.observation_space, gymnasium.spaces.Dict):
        raise ValueError(f"expected a Dict observation space, got {env.observation_space}")
    return obs_spec_of(env.observation_space, env.action_space)
