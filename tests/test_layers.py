"""The layers of docs/architecture.md ("What may import what"), read from the source: every
`import` of gazelle in every module, at any depth (inside functions and `TYPE_CHECKING`
blocks too), parsed, not run.

A module may import its own layer and the layers below; never a layer above, nor what
`ALSO_FORBIDDEN` lists. Adding a rule is one line there (or in `LAYERS`).
"""

from __future__ import annotations

import ast
import itertools
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

#: Top to bottom. The face (commands, the Python API, the plugin registry's verbs) first.
LAYERS: list[tuple[str, ...]] = [
    ("cli", "clidoc", "api", "plugins", "bench", "evaluation", "plot", "video"),
    ("algorithms",),
    ("tracking", "logging", "console", "timings", "provenance", "checkpoint", "optim"),
    ("backends",),
    ("runtime",),
    ("config",),
    ("models", "envs", "losses"),
    ("distributions",),
    ("types", "registrations", "errors", "actions"),
]

#: importer -> what it may not import although it lies below: one line per rule.
ALSO_FORBIDDEN: dict[str, tuple[str, ...]] = {
    "runtime": ("losses",),  # the learner is handed its loss (the algorithm seam)
    "models": ("envs", "losses"),
    "envs": ("models", "losses", "registrations"),
    "losses": ("models", "envs", "registrations"),
    "types": ("registrations", "errors"),
    "actions": ("types", "registrations", "errors"),
    "registrations": ("types", "errors"),
    "errors": ("types", "registrations"),
}


def _package(module: str) -> str:
    """`gazelle.algorithms.impala.loop` -> `algorithms`; the root `gazelle` -> ``."""
    return module.split(".")[1] if "." in module else ""


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def imports() -> dict[str, set[str]]:
    """Module -> the gazelle modules it imports (`from gazelle import plugins` counts as
    `gazelle.plugins`; a relative import is made absolute)."""
    found: dict[str, set[str]] = {}
    for path in sorted((SRC / "gazelle").rglob("*.py")):
        module = _name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                if base == "gazelle":
                    names.update(f"gazelle.{alias.name}" for alias in node.names)
                else:
                    names.add(base)
        found[module] = {n for n in names if n == "gazelle" or n.startswith("gazelle.")}
    return found


def forbidden(package: str) -> set[str]:
    """The packages `package` may not import: every one in a layer above its own, and its
    `ALSO_FORBIDDEN`."""
    (level,) = [i for i, layer in enumerate(LAYERS) if package in layer]
    return {*itertools.chain(*LAYERS[:level]), *ALSO_FORBIDDEN.get(package, ())}


def test_every_module_is_in_a_layer():
    layered = set(itertools.chain(*LAYERS))
    assert len(layered) == sum(map(len, LAYERS)), "a package is in two layers"
    unplaced = {m for m in imports() if _package(m) not in layered and m != "gazelle"}
    assert not unplaced, f"add these to a layer of LAYERS (and docs/architecture.md): {unplaced}"


@pytest.mark.parametrize("package", list(itertools.chain(*LAYERS)))
def test_nothing_imports_up_or_across(package: str):
    bad = sorted(
        f"{module} imports {name}"
        for module, names in imports().items()
        if _package(module) == package
        for name in names
        if _package(name) in forbidden(package)
    )
    assert not bad, "\n".join(bad)


def test_no_two_packages_import_each_other():
    edges = {
        (_package(module), _package(name))
        for module, names in imports().items()
        for name in names
        if _package(module) != _package(name) and _package(name)
    }
    circles = sorted(f"{a} <-> {b}" for a, b in edges if a < b and (b, a) in edges)
    assert not circles, circles


def test_the_docs_show_these_layers():
    """docs/architecture.md's table lists the same layers, in the same order."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("**What may import what.**")[1].split("\n\n")[1]
    rows = [line.split("|")[2] for line in section.splitlines()[2:]]
    documented = [tuple(n.rstrip("/") for n in re.findall(r"`([\w/]+)`", row)) for row in rows]
    assert documented == LAYERS
