"""`Config`: the sections of one run, and its flat view (one name per flag).

    config = Config.of(env="ALE/Pong-v5", batch_size=16)          # or Config.from_flat({...})
    config.env.id, config.impala.batch_size, config.algorithm.batch_size   # the same run
    config.get("batch_size"), config.replace(batch_size=8)                  # by flat name

`to_dict` / `from_dict` give the nested form saved in a run's `config.json` and checkpoint;
`from_dict` also reads the flat form of checkpoints written before the sections existed.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gazelle.config.errors import ConfigError
from gazelle.config.sections import (
    ALGORITHM_SECTIONS,
    COMMON_SECTIONS,
    A3CConfig,
    ActorConfig,
    AppoConfig,
    EnvConfig,
    ImpalaConfig,
    ModelConfig,
    RunConfig,
)


@dataclass(frozen=True)
class FlatField:
    """One flag: its flat name, the section attribute and field it sets, type and default."""

    name: str
    section: str
    field: str
    type: str
    default: Any
    doc: str


def _field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring (the string literal right after it in the class body;
    a subclass' own fields over those it inherits)."""
    docs: dict[str, str] = {}
    for base in reversed(cls.__mro__[1:]):
        if dataclasses.is_dataclass(base):
            docs.update(_field_docs(base))
    body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
        ):
            docs[node.target.id] = inspect.cleandoc(str(after.value.value))
    return docs


def _section_fields(section: str, cls: type) -> list[FlatField]:
    docs = _field_docs(cls)
    return [
        FlatField(
            f.metadata.get("flag", f.name), section, f.name, str(f.type), f.default, docs[f.name]
        )
        for f in fields(cls)
    ]


@functools.cache
def common_fields() -> dict[str, FlatField]:
    """Flat name -> field of the common sections (env, model, actors, run)."""
    out: dict[str, FlatField] = {}
    for section, cls in COMMON_SECTIONS.items():
        for flat in _section_fields(section, cls):
            assert flat.name not in out, f"duplicate flag {flat.name}"
            out[flat.name] = flat
    return out


@functools.cache
def algorithm_fields(algo: str) -> dict[str, FlatField]:
    """Flat name -> field of one algorithm's section."""
    return {flat.name: flat for flat in _section_fields(algo, ALGORITHM_SECTIONS[algo])}


def all_fields() -> dict[str, FlatField]:
    """Every flag once: the common fields, then each algorithm's (the first algorithm that
    has a name describes it)."""
    out = dict(common_fields())
    for algo in ALGORITHM_SECTIONS:
        for name, flat in algorithm_fields(algo).items():
            out.setdefault(name, flat)
    return out


@dataclass(frozen=True)
class Config:
    """Everything a training run needs; see the module docstring."""

    algo: str = "impala"
    """The algorithm that runs: impala | a3c | appo."""
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    actors: ActorConfig = field(default_factory=ActorConfig)
    run: RunConfig = field(default_factory=RunConfig)
    impala: ImpalaConfig = field(default_factory=ImpalaConfig)
    a3c: A3CConfig = field(default_factory=A3CConfig)
    appo: AppoConfig = field(default_factory=AppoConfig)

    @property
    def algorithm(self) -> Any:
        """The section of the algorithm that runs (`self.impala` for `algo="impala"`)."""
        return getattr(self, self.algo)

    def _locate(self, name: str) -> FlatField:
        flat = common_fields().get(name) or algorithm_fields(self.algo).get(name)
        if flat is not None:
            return flat
        owners = [algo for algo in ALGORITHM_SECTIONS if name in algorithm_fields(algo)]
        if owners:
            raise ConfigError(
                name,
                None,
                f"with --algo {' | '.join(owners)}",
                problem=f"not a setting of --algo {self.algo}",
            )
        close = difflib.get_close_matches(name, list(all_fields()), n=3)
        hint = f" (did you mean {', '.join('--' + c.replace('_', '-') for c in close)}?)"
        allowed = "a setting listed by `gazelle train --help`" + (hint if close else "")
        raise ConfigError(name, None, allowed, problem="unknown setting")

    def get(self, name: str) -> Any:
        """The value of a flat name (`"batch_size"`, `"env"`, `"algo"`, ...)."""
        if name == "algo":
            return self.algo
        flat = self._locate(name)
        return getattr(getattr(self, flat.section), flat.field)

    def replace(self, **values: Any) -> Config:
        """A copy with flat names set (`config.replace(num_actors=2, batch_size=8)`)."""
        if "algo" in values:
            algo = values.pop("algo")
            if algo not in ALGORITHM_SECTIONS:
                raise ConfigError("algo", algo, " | ".join(ALGORITHM_SECTIONS))
            self = dataclasses.replace(self, algo=algo)
        by_section: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            flat = self._locate(name)
            by_section.setdefault(flat.section, {})[flat.field] = value
        updates = {
            section: dataclasses.replace(getattr(self, section), **changes)
            for section, changes in by_section.items()
        }
        return dataclasses.replace(self, **updates)

    def flat(self) -> dict[str, Any]:
        """Flat name -> value, for the common sections and the algorithm that runs."""
        names = [*common_fields(), *algorithm_fields(self.algo)]
        return {"algo": self.algo, **{name: self.get(name) for name in names}}

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> Config:
        """Build from flat names (flags); unknown names raise `ConfigError`."""
        return cls().replace(**dict(values))

    @classmethod
    def of(cls, **values: Any) -> Config:
        """`Config.of(env="ALE/Pong-v5", total_frames=10**7)`: `from_flat` by keywords."""
        return cls.from_flat(values)

    def to_dict(self) -> dict[str, Any]:
        """The nested, JSON-ready form (saved as the run's `config.json`)."""
        return {"algo": self.algo, **{
            name: dataclasses.asdict(getattr(self, name))
            for name in (*COMMON_SECTIONS, *ALGORITHM_SECTIONS)
        }}  # fmt: skip

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Config:
        """Inverse of `to_dict`; also reads the flat dict of checkpoints saved before the
        sections existed (gazelle 0.1). Keys it does not know are ignored."""
        if not isinstance(values.get("run"), Mapping):
            known = set(all_fields()) | {"algo"}
            return cls.from_flat({k: v for k, v in values.items() if k in known})
        sections: dict[str, Any] = {}
        for name, section_cls in {**COMMON_SECTIONS, **ALGORITHM_SECTIONS}.items():
            given = values.get(name) or {}
            names = {f.name for f in fields(section_cls)}
            sections[name] = section_cls(**{k: v for k, v in given.items() if k in names})
        return cls(algo=str(values.get("algo", "impala")), **sections)
