"""The registry of algorithms and backends: what the rest of gazelle knows of each, by name.

Each algorithm declares, in its own folder, one `Algorithm` (its config section, presets,
validation, layout cost and `train`); each backend one `Backend` (what it builds, the flags
that are its own, how it shares the machine). The config, the presets, the validation, the
layout rule and the CLI read them here and never branch on a name.

The built-in ones are listed below by reference (`module:attr`) and loaded when first asked
for, as `--model module:attr` names a torso: this layer names them without importing them
(they lie above it). Adding one is its folder and one line in `BUILT_IN_ALGORITHMS` or
`BUILT_IN_BACKENDS`; `register_algorithm` / `register_backend` add one from elsewhere (a
plugin, a test's toy) in this process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The algorithm of a `Config` that names none.
DEFAULT_ALGORITHM = "impala"
#: The backend of a `Config` that names none.
DEFAULT_BACKEND = "local"

#: `--algo` name -> its `Algorithm`, as `module:attr` (in `--algo`'s listed order).
BUILT_IN_ALGORITHMS: dict[str, str] = {
    "impala": "gazelle.algorithms.impala:IMPALA",
    "a3c": "gazelle.algorithms.a3c:A3C",
    "appo": "gazelle.algorithms.appo:APPO",
}
#: `--backend` name -> its `Backend`, as `module:attr`.
BUILT_IN_BACKENDS: dict[str, str] = {
    "local": "gazelle.backends.local:LOCAL",
    "ray": "gazelle.backends.ray:RAY",
}


@dataclass(frozen=True)
class Algorithm:
    """What gazelle needs from one algorithm, declared once in its folder."""

    name: str
    """Its `--algo` name."""
    section: type
    """Its config section: a frozen dataclass with a docstring per field, one flag each
    (`gazelle.config.sections`); `Config.algorithm` holds it when this algorithm runs."""
    train: Callable[..., Any]
    """`train(config, on_progress=None) -> TrainResult` (`gazelle.algorithms.runstate`)."""
    presets: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    """Preset name (`--preset`, a field of `section`) -> env family -> flat name -> value:
    what `gazelle.config.resolve` fills unset fields from. Empty: no presets."""
    validate: Callable[[Any], None] | None = None
    """`validate(check)` checks the section's fields (`gazelle.config.validation`'s checks
    of the config; the preset's name is checked against `presets` before it)."""
    learner_rate: Callable[..., Callable[[float], float]] | None = None
    """The layout's learner cost (`gazelle.algorithms.layout`): `learner_rate(config,
    probe, device)` of a resolved run returns a measurement, `seconds -> agent steps learned
    per core-second` (every pass over a sample counted), on the algorithm's own fresh
    learner. None: no learner shares the cores with the actors (A3C's workers learn for
    themselves), and the layout is `default_num_actors`."""
    atari_frames: str = "deepmind"
    """Atari's preprocessing unless `--atari-frames` names one (`gazelle.envs.atari`)."""
    image_torso: str | None = None
    """`--model auto` for image frames; None: the machine's (`default_torso`)."""
    own_presets: tuple[str, ...] = ()
    """Presets that pick this algorithm when `--algo` is unset (impala-paper: IMPALA)."""
    env_families: tuple[str, ...] = ()
    """Env families (`gazelle.config.presets.family_of`) whose runs use this algorithm when
    `--algo` is unset (ViZDoom and continuous control: APPO)."""
    takes_loss_fn: bool = False
    """`train` takes `loss_fn=`, a loss replacing its own (`gazelle.train(loss_fn=...)`)."""
    measure_parts: Callable[..., dict[str, Any]] | None = None
    """`gazelle bench`'s parts: `measure_parts(config, seconds)` -> per-core rates of its
    env steps, inference and learning (`gazelle.bench.train`)."""


@dataclass(frozen=True)
class Backend:
    """What gazelle needs from one backend, declared once in its folder."""

    name: str
    """Its `--backend` name."""
    build: Callable[..., Any]
    """`build(request: BackendRequest) -> Transport`: actors that write unrolls for a
    learner (`gazelle.backends`)."""
    build_workers: Callable[..., Any] | None = None
    """`build_workers(request: WorkerRequest) -> Workers`: processes that each run the work
    an algorithm hands them against a parameter store (A3C's workers); None: none."""
    build_learners: Callable[..., Any] | None = None
    """`build_learners(request: LearnerRequest) -> Learners`: learners 1..N-1 of a run with
    `--learners N`, joined with the calling process as rank 0; None: one learner only."""
    own_flags: tuple[str, ...] = ()
    """Flags of the actors' section that only this backend reads: set on another backend,
    they are refused (`--ray-address` without `--backend ray`)."""
    on_this_machine: bool = True
    """Its actors run on this machine's cores, so the layout rule measures their share."""
    single_slot: bool = True
    """One unroll slot per env can keep an actor busy (`default_slots_per_env`); False:
    an actor with one unroll in flight would idle for each round trip (Ray)."""


_ALGORITHMS: dict[str, Algorithm | str] = dict(BUILT_IN_ALGORITHMS)
_BACKENDS: dict[str, Backend | str] = dict(BUILT_IN_BACKENDS)


def _load(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _unknown(kind: str, name: str, known: tuple[str, ...]) -> Exception:
    from gazelle.config.errors import ConfigError

    return ConfigError(kind, name, " | ".join(known))


def algorithm_names() -> tuple[str, ...]:
    """Every `--algo` name (the built-in ones first), loading none."""
    return tuple(_ALGORITHMS)


def algorithm(name: str) -> Algorithm:
    """The `Algorithm` of `--algo name`; `ConfigError` naming the known ones otherwise."""
    entry = _ALGORITHMS.get(name) if isinstance(name, str) else None
    if entry is None:
        raise _unknown("algo", name, algorithm_names())
    if isinstance(entry, str):
        entry = _ALGORITHMS[name] = _load(entry)
        assert isinstance(entry, Algorithm) and entry.name == name, entry
    return entry


def algorithms() -> tuple[Algorithm, ...]:
    """Every `Algorithm`, in `algorithm_names()` order."""
    return tuple(algorithm(name) for name in algorithm_names())


def backend_names() -> tuple[str, ...]:
    """Every `--backend` name (the built-in ones first), loading none."""
    return tuple(_BACKENDS)


def backend(name: str) -> Backend:
    """The `Backend` of `--backend name`; `ConfigError` naming the known ones otherwise."""
    entry = _BACKENDS.get(name) if isinstance(name, str) else None
    if entry is None:
        raise _unknown("backend", name, backend_names())
    if isinstance(entry, str):
        entry = _BACKENDS[name] = _load(entry)
        assert isinstance(entry, Backend) and entry.name == name, entry
    return entry


def backends() -> tuple[Backend, ...]:
    """Every `Backend`, in `backend_names()` order."""
    return tuple(backend(name) for name in backend_names())


def register_algorithm(descriptor: Algorithm) -> None:
    """Add an algorithm under `descriptor.name` (the same one again: a no-op); ValueError for
    a taken name."""
    _register(_ALGORITHMS, descriptor, "algorithm")


def register_backend(descriptor: Backend) -> None:
    """Add a backend under `descriptor.name` (the same one again: a no-op); ValueError for a
    taken name."""
    _register(_BACKENDS, descriptor, "backend")


def _register(table: dict[str, Any], descriptor: Algorithm | Backend, kind: str) -> None:
    name = descriptor.name
    if name in table and table[name] is not descriptor:
        # why: a built-in not loaded yet is still a string; loading it would not make the
        # name free either.
        raise ValueError(
            f"{kind} name {name!r} is taken; allowed: a name other than {' | '.join(table)}"
        )
    table[name] = descriptor


def unregister(name: str) -> None:
    """Undo `register_algorithm` / `register_backend` of `name` (KeyError for a built-in or
    an unknown name)."""
    for table, built_in in ((_ALGORITHMS, BUILT_IN_ALGORITHMS), (_BACKENDS, BUILT_IN_BACKENDS)):
        if name in table and name not in built_in:
            del table[name]
            return
    raise KeyError(f"{name!r} is not a registered algorithm or backend")
