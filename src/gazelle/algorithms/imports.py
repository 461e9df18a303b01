"""A run folder is data: what loading its config would import, and the user's say on it.

A saved config may name a torso by `module:attr` (`--model mypkg.nets:WideTorso`) or an env
by `module:EnvId`; building either imports that module, which runs its code. `gazelle test
--logdir DIR` and a resume (`gazelle train --logdir DIR`) read the config from the folder,
which may come from someone else (a shared disk, a downloaded run). So a module that the
saved config names and that this process has not imported is imported only when the user
names it on this command line: the same `--model` / `--env` again, or `--allow-import
MODULE`, or (from Python) their own `import` before the call.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from gazelle import registrations
from gazelle.config import Config, ConfigError

#: The flag that names a module a saved run may import.
FLAG = "allow_import"


def needed(config: Config, fields: Iterable[str] = ("model", "env")) -> dict[str, str]:
    """Module -> the setting that names it, for each module that building `config`'s
    `fields` would import and that is not imported yet."""
    from gazelle.envs.registry import imports_of

    found: dict[str, str] = {}
    fields = set(fields)
    torso = config.model.torso
    ref = registrations.torso_ref(torso) if "model" in fields else None
    if isinstance(ref, str) and registrations.registered_torso(torso) is None:
        module = ref.partition(":")[0]
        if module not in sys.modules:
            found[module] = f"--model {torso}"
    if "env" in fields:
        try:
            modules = imports_of(config.env.id)
        except ValueError:
            modules = []  # why: an env spec with no level; making it names the error
        for module in modules:
            found.setdefault(module, f"--env {config.env.id}")
    return found


def allowed(module: str, names: Iterable[str]) -> bool:
    """Whether `--allow-import` `names` cover `module` (itself or a package above it)."""
    return any(module == name or module.startswith(name + ".") for name in names)


def check_saved(
    config: Config,
    where: str | Path,
    allow: Iterable[str] = (),
    fields: Iterable[str] = ("model", "env"),
) -> None:
    """Refuse (one line, `ConfigError` on `--allow-import`) a saved `config` from `where`
    whose `fields` would import a module the user did not name (`allow`) and that this
    process has not imported."""
    names = list(allow)
    for module, setting in needed(config, fields).items():
        if not allowed(module, names):
            raise ConfigError(
                FLAG,
                module,
                f"--{FLAG.replace('_', '-')} {module} to trust it (or name {setting} on this "
                "command line, or import it yourself)",
                problem=f"the run in {where} names {setting}, which would import module "
                f"{module!r}; a run folder runs no code unless you say so",
            )
