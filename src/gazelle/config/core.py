"""`Config`: the sections of one run, and its flat view (one name per flag).

    config = Config.of(env="ALE/Pong-v5", batch_size=16)          # or Config.from_flat({...})
    config.env.id, config.impala.batch_size, config.algorithm.batch_size   # the same run
    config.get("batch_size"), config.replace(batch_size=8)                  # by flat name

The common sections are fields; each algorithm's section is its own (`Algorithm.section`
in `gazelle.config.registry`), read as `config.section("impala")` or `config.impala`.
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

from gazelle.config import registry
from gazelle.config.errors import ConfigError
from gazelle.config.registry import DEFAULT_ALGORITHM
from gazelle.config.sections import (
    COMMON_SECTIONS,
    ActorConfig,
    EnvConfig,
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


def algorithm_fields(algo: str) -> dict[str, FlatField]:
    """Flat name -> field of one algorithm's section (`ConfigError` for an unknown one)."""
    return dict(_algorithm_fields(algo, registry.algorithm(algo).section))


@functools.cache
def _algorithm_fields(algo: str, section: type) -> dict[str, FlatField]:
    # why: keyed by the class too, so a name registered again with another section (a
    # test's toy) is read afresh.
    return {flat.name: flat for flat in _section_fields(algo, section)}


def all_fields() -> dict[str, FlatField]:
    """Every flag once: the common fields, then each algorithm's (the first algorithm that
    has a name describes it)."""
    out = dict(common_fields())
    for algo in registry.algorithm_names():
        for name, flat in algorithm_fields(algo).items():
            out.setdefault(name, flat)
    return out


@dataclass(frozen=True)
class Config:
    """Everything a training run needs; see the module docstring."""

    algo: str = DEFAULT_ALGORITHM
    """The algorithm that runs: impala | a3c | appo (`gazelle.config.registry`)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    actors: ActorConfig = field(default_factory=ActorConfig)
    run: RunConfig = field(default_factory=RunConfig)
    sections: tuple[tuple[str, Any], ...] = ()
    """The algorithms' sections that differ from their defaults, `(name, section)` sorted
    by name (so that two configs of the same values are equal); read them with `section`."""

    def __post_init__(self) -> None:
        kept = tuple(
            sorted(
                ((name, value) for name, value in self.sections
                 if value != registry.algorithm(name).section()),
                key=lambda item: item[0],
            )
        )  # fmt: skip
        object.__setattr__(self, "sections", kept)

    def section(self, algo: str) -> Any:
        """The section of algorithm `algo` (its defaults unless set)."""
        for name, value in self.sections:
            if name == algo:
                return value
        return registry.algorithm(algo).section()

    @property
    def algorithm(self) -> Any:
        """The section of the algorithm that runs (`self.impala` for `algo="impala"`)."""
        return self.section(self.algo)

    def __getattr__(self, name: str) -> Any:
        # why: `config.impala`, `config.a3c`: an algorithm's section by its name, as a field.
        if not name.startswith("_") and name in registry.algorithm_names():
            return self.section(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _locate(self, name: str) -> FlatField:
        flat = common_fields().get(name) or algorithm_fields(self.algo).get(name)
        if flat is not None:
            return flat
        owners = [algo for algo in registry.algorithm_names() if name in algorithm_fields(algo)]
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
        return getattr(self._section_of(flat.section), flat.field)

    def _section_of(self, name: str) -> Any:
        return getattr(self, name) if name in COMMON_SECTIONS else self.section(name)

    def replace(self, **values: Any) -> Config:
        """A copy with flat names set (`config.replace(num_actors=2, batch_size=8)`)."""
        if "algo" in values:
            algo = values.pop("algo")
            registry.algorithm(algo)  # why: an unknown name fails here, naming the known
            self = dataclasses.replace(self, algo=algo)
        by_section: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            flat = self._locate(name)
            by_section.setdefault(flat.section, {})[flat.field] = value
        updates = {
            section: dataclasses.replace(self._section_of(section), **changes)
            for section, changes in by_section.items()
        }
        common = {name: value for name, value in updates.items() if name in COMMON_SECTIONS}
        algorithms = {name: value for name, value in updates.items() if name not in common}
        if algorithms:
            common["sections"] = (*dict(self.sections, **algorithms).items(),)
        return dataclasses.replace(self, **common)

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
        """The nested, JSON-ready form (saved as the run's `config.json`): the common
        sections, then every algorithm's."""
        common = {name: dataclasses.asdict(getattr(self, name)) for name in COMMON_SECTIONS}
        algorithms = {
            name: dataclasses.asdict(self.section(name)) for name in registry.algorithm_names()
        }
        return {"algo": self.algo, **common, **algorithms}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Config:
        """Inverse of `to_dict`; also reads the flat dict of checkpoints saved before the
        sections existed (gazelle 0.1). Keys it does not know are ignored."""
        if not isinstance(values.get("run"), Mapping):
            known = set(all_fields()) | {"algo"}
            return cls.from_flat({k: v for k, v in values.items() if k in known})
        sections: dict[str, Any] = {}
        owners = {
            **COMMON_SECTIONS,
            **{name: registry.algorithm(name).section for name in registry.algorithm_names()},
        }
        for name, section_cls in owners.items():
            given = values.get(name) or {}
            names = {f.name for f in fields(section_cls)}
            sections[name] = section_cls(**{k: v for k, v in given.items() if k in names})
        common = {name: sections.pop(name) for name in COMMON_SECTIONS}
        algo = str(values.get("algo", DEFAULT_ALGORITHM))
        return cls(algo=algo, **common, sections=tuple(sections.items()))
