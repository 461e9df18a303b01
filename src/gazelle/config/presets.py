"""Presets: the values of the fields a user leaves unset, per env family and preset name.

`resolve(config, env)` fills every `None` field of a `Config` from, in order: what the env id
itself implies (an Atari id's protocol), the algorithm's preset for the env family, and
gazelle's machine-dependent rules (torso, actors). All it knows of the env is what
`gazelle.envs.probe` found (`EnvProbe`): its kind, its frames, its protocol. The resolved
config is what a run saves in its logdir, so `config.json` always shows every value that
ran.

Each algorithm declares its own presets (`Algorithm.presets` in `gazelle.config.registry`:
IMPALA's `gazelle` and `impala-paper` in `gazelle.algorithms.impala.presets`, APPO's on top
of them, A3C's `gazelle` and `universe-starter` in `gazelle.algorithms.a3c.presets`); this
module holds only what every algorithm shares.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gazelle.config import registry
from gazelle.config.core import Config
from gazelle.config.errors import ConfigError
from gazelle.config.registry import DEFAULT_ALGORITHM, DEFAULT_BACKEND

if TYPE_CHECKING:
    from gazelle.envs.probe import EnvProbe
    from gazelle.types import ObsSpec


#: Families named by the env's kind alone; any other kind's family is read from its spaces.
KIND_FAMILIES = ("atari", "dmlab", "vizdoom")


def default_algo(env: str, preset: str | None = None) -> str:
    """`--algo` left unset: the algorithm a named `preset` belongs to (`Algorithm.own_presets`:
    impala-paper is IMPALA's, universe-starter A3C's), else the one whose
    `Algorithm.env_families` holds the family of every level of the `env` spec (ViZDoom and
    continuous control: APPO), else impala. A spec that does not resolve, or whose first
    level cannot be made, gets impala here; the run's own checks then name what is wrong
    with it."""
    from gazelle.envs import probe

    algorithms = registry.algorithms()
    # why: a preset other than gazelle's is one algorithm's (the paper's IMPALA, the seed's
    # A3C); the family's algorithm would run it as another's, or refuse it.
    for algorithm in algorithms:
        if preset in algorithm.own_presets:
            return algorithm.name
    try:
        kinds = probe.kinds(env)  # why: resolved once; the run's probe reuses them
    except (ValueError, ImportError):
        return DEFAULT_ALGORITHM
    if len(kinds) != 1:
        return DEFAULT_ALGORITHM
    (kind,) = kinds
    family = kind if kind in KIND_FAMILIES else _spaces_family(env, kind)
    for algorithm in algorithms:
        if family in algorithm.env_families:
            return algorithm.name
    return DEFAULT_ALGORITHM


def fresh_logdir(env: str, root: str = "runs") -> str:
    """`--logdir` left unset (the CLI and `gazelle.train` alike): a folder no run has used,
    `<root>/<env>-<YYYYmmdd-HHMMSS>` (`-2`, `-3`, ... when two runs start in one second), so
    that a run never resumes another by accident; resuming names its folder."""
    name = f"{root}/{env.replace('/', '_').replace(',', '+')[:60]}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = name, 1
    while Path(candidate).exists():
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def _spaces_family(env: str, kind: str) -> str | None:
    """The family of env spec `env` (levels of one `kind`, not one of `KIND_FAMILIES`) read
    from its first level's spaces (one env made and closed); None if it cannot be made.
    The run's probe checks that every level shares them."""
    from gazelle.envs import probe
    from gazelle.envs import registry as envs

    level = envs.expand_levels(env)[0]
    try:
        made = envs.make_resolved(probe.resolved(level), level, seed=0)
    except Exception:  # why: any failure is the run's probe's to report, in full
        return None
    try:
        return family_of(kind, envs.obs_spec(made))
    except ValueError:
        return None
    finally:
        made.close()


def family_of(kind: str, obs_spec: ObsSpec) -> str:
    """Preset family of an env of `kind` (`EnvProbe.kind`) with `obs_spec`: its kind for
    atari, dmlab and vizdoom; else image (an image field), control (no image field and a
    Gaussian action component: a float Box, e.g. MuJoCo's), or vector."""
    if kind in KIND_FAMILIES:
        return kind
    if obs_spec.is_image:
        return "image"
    return "vector" if obs_spec.actions.is_discrete else "control"


def env_family(env: EnvProbe) -> str:
    """Preset family of a probed env (`family_of` its kind and spaces): atari, dmlab,
    vizdoom, image, control or vector."""
    return family_of(env.kind, env.obs_spec)


def default_num_actors(num_levels: int = 1, cores: int | None = None) -> int:
    """Actors for `--num-actors` left unset: every core but the learner's, at least 2 (so a
    2-core laptop still overlaps acting with learning) and one per level."""
    cores = cores or os.cpu_count() or 1
    return max(2, cores - 1, num_levels)


#: Env groups per actor with central inference when --env-groups is unset
#: (`ActorsConfig.env_groups`; measured in docs/performance.md, "Env groups").
DEFAULT_CENTRAL_GROUPS = 2


def default_slots_per_env(
    num_actors: int, envs_per_actor: int, batch_size: int, backend: str = DEFAULT_BACKEND
) -> int:
    """`--slots-per-env` left unset: 1 where the actors' envs hold a whole batch plus one
    actor's next unroll (one actor then acts while a batch waits for the learner), else 2.

    When the learner is the bottleneck every slot fills, so the slots set the policy lag:
    about `num_actors * slots_per_env * envs_per_actor / batch_size` updates. One actor needs
    2 (it acts while the learner trains on its last unroll); with several, a second slot
    only adds lag: the seed's actors hold one finished unroll each. Breakout, 2 actors x 32
    envs, B=8, 2 seeds: a median lag of 8 updates with 1 slot against 16 with 2, the same
    return per frame, 5% more frames/s (docs/results.md). Ray keeps 2: an actor with one
    call would idle for each round trip (not measured)."""
    fits = num_actors * envs_per_actor >= batch_size + envs_per_actor
    return 1 if fits and registry.backend(backend).single_slot else 2


def default_torso(frame_is_image: bool, cuda: bool) -> str:
    """`--model auto`: mlp for vectors; for images the IMPALA ResNet (deep) on a GPU, the
    shallow IMPALA torso on a CPU, where the deep one trains ~7x slower (docs/performance.md)."""
    if not frame_is_image:
        return "mlp"
    return "deep" if cuda else "shallow"


def resolve(config: Config, env: EnvProbe, cuda: bool = False) -> Config:
    """Fill the fields left None (see the module docstring) for the env `gazelle.envs.probe`
    found; `cuda`: the learner's device."""
    algorithm = registry.algorithm(config.algo)
    family = env_family(env)
    frame_is_image = env.obs_spec.is_image
    defaults: dict[str, Any] = {"sticky_actions": False, "life_loss": False}
    if algorithm.presets:
        preset = config.algorithm.preset
        if preset not in algorithm.presets:
            raise ConfigError("preset", preset, " | ".join(algorithm.presets))
        defaults.update(algorithm.presets[preset].get(family, {}))
    defaults.update(env.env_defaults)
    updates = {k: v for k, v in defaults.items() if config.get(k) is None}
    if config.model.torso == "auto":
        updates["model"] = default_torso(frame_is_image, cuda)
        if algorithm.image_torso is not None and frame_is_image:
            updates["model"] = algorithm.image_torso  # e.g. A3C: the seed's conv torso
    return config.replace(**updates)


def blame_preset(err: ConfigError, given: Config, resolved: Config, env: EnvProbe) -> ConfigError:
    """`err` from validating `resolved`, reworded when its flag was left unset in `given`
    and filled by the preset: the user never typed that value, so the message says where it
    came from and that setting the flag is the way out (e.g. `--batch-size 4` on a control
    env, whose preset has 8 minibatches)."""
    try:
        unset = given.get(err.name) is None and resolved.get(err.name) is not None
    except (KeyError, AttributeError, ValueError):
        return err  # a name that is not a flag (e.g. a pair of flags): as it was
    if not unset:
        return err
    preset = getattr(resolved.algorithm, "preset", None)
    source = f"{resolved.algo}'s {preset} preset for {env_family(env)} envs"
    flag = "--" + err.name.replace("_", "-")
    problem = f"{err.value!r} is {source}, and it does not fit the flags given (set {flag})"
    return ConfigError(err.name, err.value, err.allowed, problem=problem)
