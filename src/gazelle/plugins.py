"""What a user registers by name, and how it reaches the actor processes.

- `register_torso(name, factory)`: `factory(frame_shape) -> nn.Module` with an int
  `output_size` (built by `gazelle.models.custom`); a `module:attr` path works as a torso
  name without registering (`--model mypkg.nets:WideTorso`).
- `register_env(name, maker)`: a Gymnasium id (registered in Gymnasium's own registry, so
  `gazelle.envs.make` and every part of gazelle find it like any other id).

Actor processes are started with `spawn`: they import gazelle afresh, and a registration
that a script made under `if __name__ == "__main__":` is not there by itself. `capture()`
is sent with every child process and `Registrations.restore()` replays it there, before the
child builds anything (`gazelle.backends.local.child.child_main`). Factories travel by
reference (pickle's module + name), so `register_*` checks at once that a child can import
them: a module-level function or class (of the script itself too: `spawn` re-imports the
main script in the child), or a `module:attr` string. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import warnings
from collections.abc import Callable
from typing import Any

#: A factory, or its `module:attr` path (imported where it is first used).
FactoryRef = Callable[..., Any] | str

PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_TORSO_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")


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


def check_importable(kind: str, factory: Any) -> None:
    """Raise (one line) unless `factory` is a `module:attr` string or a callable that a
    spawned process can unpickle by reference (not a lambda or a local function)."""
    if isinstance(factory, str):
        if not PATH.match(factory):
            raise ValueError(
                f"{kind} factory {factory!r}: invalid path; allowed: 'module:attr', e.g. "
                "'mypkg.nets:WideTorso'"
            )
        return
    if not callable(factory):
        raise TypeError(
            f"{kind} factory {factory!r}: not callable; allowed: a module-level function or "
            "class, or a 'module:attr' string"
        )
    try:
        pickle.dumps(factory)
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        raise ValueError(
            f"{kind} factory {factory!r} cannot reach the actor processes (they import it "
            f"by name: {err}); allowed: a module-level function or class, or a "
            "'module:attr' string"
        ) from err


def register_torso(name: str, factory: FactoryRef, *, replace: bool = False) -> None:
    """Make `name` a torso: `Config.of(model=name)` in this process and its actors.

    Registering the same factory again is a no-op; another factory under a taken name needs
    `replace=True`. Raises ValueError/TypeError (one line) for a bad name or factory.
    """
    from gazelle.models.torsos import TORSOS

    if not isinstance(name, str) or not _TORSO_NAME.match(name):
        raise ValueError(
            f"torso name {name!r}: invalid; allowed: letters, digits, '_', '.', '-' "
            "(starting with a letter or '_')"
        )
    if name in TORSOS or name == "auto":
        raise ValueError(
            f"torso name {name!r} is built in; allowed: a name other than auto | "
            f"{' | '.join(TORSOS)}"
        )
    check_importable("torso", factory)
    existing = _TORSOS.get(name)
    if existing is not None and existing != factory and not replace:
        raise ValueError(
            f"torso {name!r} is already registered (as {describe(existing)}); allowed: a "
            "new name, or replace=True"
        )
    _TORSOS[name] = factory


def register_env(
    name: str,
    maker: FactoryRef,
    *,
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
    replace: bool = False,
) -> None:
    """Make `name` a Gymnasium id built by `maker(**kwargs)` (a Gymnasium env), usable as
    `Config.of(env=name)` in this process and its actors; `max_episode_steps` adds a time
    limit (its cut episodes are truncated, not terminated).

    Registering the same maker again is a no-op; another maker under a taken name needs
    `replace=True`; an id Gymnasium already has (`CartPole-v1`) is refused. Raises
    ValueError/TypeError (one line) for a bad name or maker.
    """
    import gymnasium
    from gymnasium.envs.registration import parse_env_id

    allowed = "a Gymnasium id such as 'MyTask-v0' or 'mypkg/MyTask-v0'"
    if not isinstance(name, str) or "," in name or ":" in name or name == "dmlab30":
        raise ValueError(f"env name {name!r}: invalid; allowed: {allowed}")
    try:
        parse_env_id(name)
    except gymnasium.error.Error as err:
        raise ValueError(f"env name {name!r}: invalid; allowed: {allowed}") from err
    check_importable("env", maker)
    if max_episode_steps is not None and (
        isinstance(max_episode_steps, bool)
        or not isinstance(max_episode_steps, int)
        or max_episode_steps <= 0
    ):
        raise ValueError(
            f"max_episode_steps {max_episode_steps!r}: invalid; allowed: a positive int or None"
        )
    try:
        pickle.dumps(kwargs)
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        raise ValueError(
            f"env kwargs {kwargs!r} cannot reach the actor processes ({err}); allowed: "
            "picklable values"
        ) from err
    entry = EnvRegistration(name, maker, max_episode_steps, tuple(sorted((kwargs or {}).items())))
    existing = _ENVS.get(name)
    if existing == entry:
        return
    if existing is None and name in gymnasium.registry:
        raise ValueError(f"env name {name!r} is already a Gymnasium id; allowed: a new id")
    if existing is not None and not replace:
        raise ValueError(
            f"env {name!r} is already registered (as {describe(existing.maker)}); allowed: a "
            "new id, or replace=True"
        )
    entry.apply()
    _ENVS[name] = entry


def torso_ref(name: str) -> FactoryRef | None:
    """The factory of registered torso `name`, `name` itself for a `module:attr` path, or
    None."""
    if name in _TORSOS:
        return _TORSOS[name]
    return name if PATH.match(name) else None


def torso_names() -> tuple[str, ...]:
    """The registered torsos' names."""
    return tuple(_TORSOS)


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
            entry.apply()
            _ENVS[entry.name] = entry


def capture() -> Registrations:
    """This process's registrations (for a child process: `restore()` them there)."""
    return Registrations(tuple(_TORSOS.items()), tuple(_ENVS.values()))


def forget(name: str) -> None:
    """Undo `register_torso` / `register_env` of `name` in this process (KeyError if none)."""
    if name in _TORSOS:
        del _TORSOS[name]
    elif name in _ENVS:
        import gymnasium

        del _ENVS[name]
        gymnasium.registry.pop(name, None)
    else:
        raise KeyError(f"{name!r} is not registered; registered: {sorted({*_TORSOS, *_ENVS})}")
