"""Dependencies run one way: ``proxy → backends → config → adapters``, and only
``proxy`` imports Litestar: the adapters stay pure translation and the backends stay
usable without the web framework, so either can be tested and reused on its own.

Read from the source with ``ast`` (every import, including the ones inside functions
that load an optional library lazily), so a layer reaching up fails here rather than
as an import cycle the day someone imports the two in the other order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What each of the project's packages may import of the others (and of Litestar).
ALLOWED: dict[str, frozenset[str]] = {
    "proxy": frozenset({"backends", "config", "adapters", "litestar"}),
    "backends": frozenset({"config", "adapters"}),
    "config": frozenset({"adapters"}),
    "adapters": frozenset(),
}
WATCHED = frozenset(ALLOWED) | {"litestar"}


def imported_packages(source: str) -> list[tuple[int, str]]:
    """The (line, top-level package) of every absolute import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def violations(package: str, sources: dict[str, str]) -> list[str]:
    """Each import in ``sources`` (name → text) of a package ``package`` may not use."""
    return [
        f"{name}:{line} imports {top}"
        for name, source in sources.items()
        for line, top in imported_packages(source)
        if top in WATCHED and top != package and top not in ALLOWED[package]
    ]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    sources = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in files}
    assert violations(package, sources) == []


@pytest.mark.parametrize(
    ("package", "source", "expected"),
    [
        ("adapters", "from backends.base import Capabilities\n", ["probe.py:1 imports backends"]),
        ("adapters", "def f():\n    import proxy.app\n", ["probe.py:2 imports proxy"]),
        ("backends", "import msgspec\nfrom litestar import Litestar\n", ["probe.py:2 imports litestar"]),
        ("config", "from backends import registry\n", ["probe.py:1 imports backends"]),
        ("backends", "from adapters.canonical import Event\nfrom config import ModelRoute\n", []),
        ("adapters", "from .canonical import Event\nimport msgspec\n", []),
    ],
)
def test_the_check_names_an_upward_import(package: str, source: str, expected: list[str]) -> None:
    """The check itself can fail: an upward import, even a lazy one, is named."""
    assert violations(package, {"probe.py": source}) == expected


# ---- no import cycles between files ------------------------------------------------
# A cycle between two modules is one design decision spread over two files, whichever
# import is deferred into a function to dodge the ImportError; so every import counts,
# lazy ones too, but only those between this project's own modules.

PROJECT = tuple(ALLOWED)


def module_name(path: Path, root: Path) -> str:
    """``backends/onnx/backend.py`` → ``backends.onnx.backend`` (a package is its ``__init__``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(name: str, is_package: bool, source: str, known: set[str]) -> set[str]:
    """The project modules ``source`` (module ``name``) imports, relative ones resolved;
    ``from package import module`` counts as importing the module itself."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - (node.level - 1)] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module for alias in node.names]
        else:
            continue
        for target in targets:
            # ``import a.b.c`` names a module that may be a package; keep the longest known prefix.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.split(".")[0] in PROJECT:
                found.add(target)
    return found


def import_graph(sources: dict[str, tuple[bool, str]]) -> dict[str, set[str]]:
    """Module name → the project modules it imports, from (is_package, text) per module."""
    known = set(sources)
    return {name: imported_modules(name, is_package, text, known) for name, (is_package, text) in sources.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, …, a]``, or None (depth-first, colouring)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for following in sorted(graph.get(node, ())):
            if state.get(following) == 1:
                return path[path.index(following) :] + [following]
            if following not in state and (cycle := visit(following)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def project_sources() -> dict[str, tuple[bool, str]]:
    return {
        module_name(path, ROOT): (path.name == "__init__.py", path.read_text(encoding="utf-8"))
        for package in PROJECT
        for path in sorted((ROOT / package).rglob("*.py"))
    }


# Cycles issue 25 names that are not broken yet: each edge listed is left out of the graph
# so the check guards against new ones meanwhile; the list only shrinks.
NOT_YET_BROKEN = {
    ("backends.upstream.embedding", "backends.upstream.backend"),
}


def test_no_import_cycle_between_files() -> None:
    """Package ``__init__`` re-exports are edges too, so a package importing its own
    submodule that imports it back is a cycle like any other."""
    graph = import_graph(project_sources())
    for importer, imported in NOT_YET_BROKEN:
        assert imported in graph[importer], f"{importer} no longer imports {imported}: drop it from NOT_YET_BROKEN"
        graph[importer].discard(imported)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"backends.a": (False, "from backends import b\n"), "backends.b": (False, "def f():\n    from .a import x\n")},
         ["backends.a", "backends.b", "backends.a"]),
        ({"proxy.cli": (False, "from proxy import workers\n"), "proxy.workers": (False, "import config\n"), "config": (True, "")},
         None),
        ({"backends.p": (True, "from .q import y\n"), "backends.p.q": (False, "from .. import p\n")},
         ["backends.p", "backends.p.q", "backends.p"]),
    ],
)
def test_the_cycle_check_follows_relative_and_lazy_imports(sources: dict[str, tuple[bool, str]], expected: list[str] | None) -> None:
    """The check itself can fail: a cycle closed by a relative, function-level import is named."""
    assert find_cycle(import_graph(sources)) == expected
