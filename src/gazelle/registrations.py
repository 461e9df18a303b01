"""What this process registered by name (torsos, envs), and how it reaches child processes.

The registry itself: `gazelle.plugins` holds the verbs that fill it (`register_torso`,
`register_env`, `forget`, with their checks); the models read it (`gazelle.models.custom`
builds a registered torso), the config checks names against it, and every backend sends
`capture()` with each process it starts, where `Registrations.restore()` replays it before
the process builds anything (`gazelle.backends.local.child.child_main`). It imports nothing
of gazelle and no torch, so anything may import it.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable
from typing import Any

#: A factory, or its `module:attr` path (imported where it is first used).
FactoryRef = Callable[..., Any] | str

PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclasses.dataclass(frozen=True)
class EnvRegistration:
    """One `register_env` call: the Gymnasium id, its maker and `gymnasium.register`'s
    `max_episode_steps` and `kwargs`."""

    name: str
    maker: FactoryRef
    max_episode_steps: int | None = None
    kwargs: tuple[tuple[str, Any], ...] = ()

    def apply(self) -> None:
        import gymnasium

        with warnings.catch_warnings():  # why: replace=True re-registers on purpose
            warnings.simplefilter("ignore")
            gymnasium.register(
                self.name,
                entry_point=self.maker,
                max_episode_steps=self.max_episode_steps,
                kwargs=dict(self.kwargs),
            )


_TORSOS: dict[str, FactoryRef] = {}
_ENVS: dict[str, EnvRegistration] = {}


def describe(factory: FactoryRef) -> str:
    """`module:qualname` of a factory (the string itself for a path)."""
    if isinstance(factory, str):
        return factory
    return f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)}"


def torso_ref(name: str) -> FactoryRef | None:
    """The factory of registered torso `name`, `name` itself for a `module:attr` path, or
    None."""
    if name in _TORSOS:
        return _TORSOS[name]
    return name if PATH.match(name) else None


def torso_names() -> tuple[str, ...]:
    """The registered torsos' names."""
    return tuple(_TORSOS)


def registered_torso(name: str) -> FactoryRef | None:
    """The factory registered as torso `name` (not a path), or None."""
    return _TORSOS.get(name)


def registered_env(name: str) -> EnvRegistration | None:
    """What was registered as env `name`, or None."""
    return _ENVS.get(name)


def add_torso(name: str, factory: FactoryRef) -> None:
    """Record torso `name` (the checks are `gazelle.plugins.register_torso`'s)."""
    _TORSOS[name] = factory


def add_env(entry: EnvRegistration) -> None:
    """Register `entry` with Gymnasium and record it (the checks are
    `gazelle.plugins.register_env`'s)."""
    entry.apply()
    _ENVS[entry.name] = entry


def remove(name: str) -> None:
    """Undo the registration of torso or env `name` (KeyError if none)."""
    if name in _TORSOS:
        del _TORSOS[name]
    elif name in _ENVS:
        import gymnasium

        del _ENVS[name]
        gymnasium.registry.pop(name, None)
    else:
        raise KeyError(f"{name!r} is not registered; registered: {sorted({*_TORSOS, *_ENVS})}")


@dataclasses.dataclass(frozen=True)
class Registrations:
    """Every registration of a process, picklable, for its child processes."""

    torsos: tuple[tuple[str, FactoryRef], ...]
    envs: tuple[EnvRegistration, ...]

    def restore(self) -> None:
        """Register all of it here (the parent's win over any of the same name: the script
        re-imported by `spawn` may have registered some already)."""
        _TORSOS.update(self.torsos)
        for entry in self.envs:
            add_env(entry)


def capture() -> Registrations:
    """This process's registrations (for a child process: `restore()` them there)."""
    return Registrations(tuple(_TORSOS.items()), tuple(_ENVS.values()))
