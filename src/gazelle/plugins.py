"""What a user registers by name, and how it reaches the actor processes.

- `register_torso(name, factory)`: `factory(frame_shape) -> nn.Module` with an int
  `output_size` (built by `gazelle.models.custom`); a `module:attr` path works as a torso
  name without registering (`--model mypkg.nets:WideTorso`).
- `register_env(name, maker)`: a Gymnasium id (registered in Gymnasium's own registry, so
  `gazelle.envs.make` and every part of gazelle find it like any other id).

The registry these fill is `gazelle.registrations`: the models, the config and the backends
read it there and never import this module (which imports `gazelle.models`' built-in torsos
to refuse their names). Actor processes are started with `spawn`: they import gazelle
afresh, and a registration that a script made under `if __name__ == "__main__":` is not
there by itself. `gazelle.registrations.capture()` is sent with every child process and
`Registrations.restore()` replays it there, before the child builds anything
(`gazelle.backends.local.child.child_main`). Factories travel by reference (pickle's module
+ name), so `register_*` checks at once that a child can import them: a module-level
function or class (of the script itself too: `spawn` re-imports the main script in the
child), or a `module:attr` string. Nothing here imports torch.
"""

from __future__ import annotations

import pickle
import re
from typing import Any

from gazelle import registrations
from gazelle.registrations import PATH, EnvRegistration, FactoryRef, describe

_TORSO_NAME = re.compile(r"^[A-Za-z_][\w.-]*$")


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
    existing = registrations.registered_torso(name)
    if existing is not None and existing != factory and not replace:
        raise ValueError(
            f"torso {name!r} is already registered (as {describe(existing)}); allowed: a "
            "new name, or replace=True"
        )
    registrations.add_torso(name, factory)


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
    existing = registrations.registered_env(name)
    if existing == entry:
        return
    if existing is None and name in gymnasium.registry:
        raise ValueError(f"env name {name!r} is already a Gymnasium id; allowed: a new id")
    if existing is not None and not replace:
        raise ValueError(
            f"env {name!r} is already registered (as {describe(existing.maker)}); allowed: a "
            "new id, or replace=True"
        )
    registrations.add_env(entry)


def forget(name: str) -> None:
    """Undo `register_torso` / `register_env` of `name` in this process (KeyError if none)."""
    registrations.remove(name)
