"""The layers of docs/architecture.md ("What may import what"), read from the source: every
`import` of gazelle in every module, at any depth (inside functions and `TYPE_CHECKING`
blocks too), parsed, not run.

A module may import its own layer and the layers below; never a layer above, nor what
`ALSO_FORBIDDEN` lists. Adding a rule is one line there (or in `LAYERS`). No module may take
part in an import circle, between packages or inside one (`test_no_module_is_in_a_circle`).
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
    (
        "cli",
        "clidoc",
        "presetdoc",
        "api",
        "plugins",
        "bench",
        "evaluation",
        "plot",
        "video",
        "suite",
        "tune",
    ),
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


def _name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_imports(src: Path, top: str = "gazelle") -> dict[str, set[str]]:
    """Module -> the modules of package `top` it imports, under source root `src`, at any
    depth of its code. `from package import name` counts as the submodule `package.name`
    where there is one, else as `package`; a relative import is made absolute."""
    paths = sorted((src / top).rglob("*.py"))
    modules = {_name(path, src) for path in paths}
    found: dict[str, set[str]] = {}
    for path in paths:
        module = _name(path, src)
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
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    names.add(sub if sub in modules or base == top else base)
        found[module] = {n for n in names if n == top or n.startswith(top + ".")}
    return found


@cache
def imports() -> dict[str, set[str]]:
    """Module -> the gazelle modules it imports (`from gazelle import plugins` counts as
    `gazelle.plugins`, `from gazelle.algorithms import stops` as `gazelle.algorithms.stops`)."""
    return read_imports(SRC)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph` (module -> modules it imports): each strongly connected
    set of two or more modules (or one that imports itself), sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for name in sorted(graph.get(module, ())):
            if name not in graph:
                continue  # a name outside the tree read (it imports nothing we know of)
            if name not in index:
                visit(name)
                low[module] = min(low[module], low[name])
            elif name in on_stack:
                low[module] = min(low[module], index[name])
        if low[module] == index[module]:
            members = []
            while True:
                name = stack.pop()
                on_stack.discard(name)
                members.append(name)
                if name == module:
                    break
            if len(members) > 1 or module in graph[module]:
                found.append(sorted(members))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


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


#: The modules of the backends' package that others may import: the unroll's field layout,
#: shared by every backend and by the loops that index batches (to move to the runtime), and
#: the learners' process group on torch.distributed, shared by every backend that runs
#: several learners (`--learners N`).
SHARED_BACKEND_MODULES = ("gazelle.backends.local.layout", "gazelle.backends.collective")


def _backend_of(module: str) -> str | None:
    """`gazelle.backends.ray.fleet` -> `ray`; None outside a backend's package."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "backends" else None


def test_a_backend_imports_no_other_backend_and_an_algorithm_none():
    """A backend knows no other backend (the Ray parameter server no local module), and an
    algorithm reaches its backend through `gazelle.backends` only, never a backend's own
    package (no `--backend` branch needs one)."""
    bad = sorted(
        f"{module} imports {name}"
        for module, names in imports().items()
        for name in names
        if _backend_of(name) is not None
        and name not in SHARED_BACKEND_MODULES
        and _backend_of(module) != _backend_of(name)
        and (_backend_of(module) is not None or _package(module) == "algorithms")
    )
    assert not bad, "\n".join(bad)


def test_no_module_is_in_a_circle():
    """No import circle between modules, inside a package or across packages, counting
    imports inside functions and `TYPE_CHECKING` blocks (a circle made legal by importing
    late is still a circle: each side needs the other)."""
    found = circles(imports())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_circle_inside_a_package_is_found(tmp_path):
    """The check above on a tree with circles: two modules of one package, one importing the
    other at module level and the other inside a function, and a package whose `__init__`
    imports a module that imports the package back; a chain without a circle passes."""
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from toy import b\n",
        "b.py": "def late():\n    from toy.a import x\n",
        "c.py": "import toy.a\n",  # into the circle, not part of it
        "sub/__init__.py": "from toy.sub.inner import y\n",
        "sub/inner.py": "from toy.sub import z\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = read_imports(tmp_path, "toy")
    assert circles(graph) == [["toy.a", "toy.b"], ["toy.sub", "toy.sub.inner"]]
    (pkg / "b.py").write_text("import toy.c\n")
    (pkg / "sub" / "inner.py").write_text("")
    assert circles(read_imports(tmp_path, "toy")) == [["toy.a", "toy.b", "toy.c"]]
    (pkg / "c.py").write_text("")
    assert circles(read_imports(tmp_path, "toy")) == []


def test_the_docs_show_these_layers():
    """docs/architecture.md's table lists the same layers, in the same order."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("**What may import what.**")[1].split("\n\n")[1]
    rows = [line.split("|")[2] for line in section.splitlines()[2:]]
    documented = [tuple(n.rstrip("/") for n in re.findall(r"`([\w/]+)`", row)) for row in rows]
    assert documented == LAYERS
