"""Dependencies between dragoman's layers run one way: ``proxy → backends → config →
adapters``, and only ``proxy`` imports Litestar: the adapters stay pure translation and the backends stay
usable without the web framework, so either can be tested and reused on its own.

Read from the source with ``ast`` (every import, including the ones inside functions
that load an optional library lazily), so a layer reaching up fails here rather than
as an import cycle the day someone imports the two in the other order. Inside the ONNX
backend, the worker process's modules (onnx/worker/) and the server side meet only in
the few modules both import (the pipe protocol among them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dragoman"

# What each of the project's packages may import of the others (and of Litestar).
ALLOWED: dict[str, frozenset[str]] = {
    "proxy": frozenset({"backends", "config", "adapters", "litestar"}),
    "backends": frozenset({"config", "adapters"}),
    "config": frozenset({"adapters"}),
    "adapters": frozenset(),
}
WATCHED = frozenset(ALLOWED) | {"litestar"}


def layer(module: str, names: tuple[str, ...] = ()) -> str:
    """The layer an absolute import reaches: ``dragoman.backends.x`` → ``backends``
    (``from dragoman import config`` → ``config``); anything else, its top-level name."""
    parts = module.split(".")
    if parts[0] != "dragoman":
        return parts[0]
    if len(parts) > 1:
        return parts[1]
    return names[0] if len(names) == 1 else "dragoman"


def imported_packages(source: str) -> list[tuple[int, str]]:
    """The (line, layer or top-level package) of every absolute import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, layer(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, layer(node.module, (alias.name,))) for alias in node.names]
    return sorted(set(found))


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
    files = sorted((PACKAGE / package).rglob("*.py"))
    assert files, f"no sources under dragoman/{package}/"
    sources = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in files}
    assert violations(package, sources) == []


@pytest.mark.parametrize(
    ("package", "source", "expected"),
    [
        ("adapters", "from dragoman.backends.base import Capabilities\n", ["probe.py:1 imports backends"]),
        ("adapters", "def f():\n    import dragoman.proxy.app\n", ["probe.py:2 imports proxy"]),
        ("backends", "import msgspec\nfrom litestar import Litestar\n", ["probe.py:2 imports litestar"]),
        ("config", "from dragoman import backends\n", ["probe.py:1 imports backends"]),
        ("backends", "from dragoman.adapters.canonical import Event\nfrom dragoman.config import ModelRoute\n", []),
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

PROJECT = "dragoman"


def module_name(path: Path, root: Path) -> str:
    """``dragoman/backends/onnx/backend.py`` → ``dragoman.backends.onnx.backend`` (a package is its ``__init__``)."""
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
            if target and target != name and target.split(".")[0] == PROJECT:
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
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_import_cycle_between_files() -> None:
    """Package ``__init__`` re-exports are edges too, so a package importing its own
    submodule that imports it back is a cycle like any other."""
    cycle = find_cycle(import_graph(project_sources()))
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"dragoman.backends.a": (False, "from dragoman.backends import b\n"), "dragoman.backends.b": (False, "def f():\n    from .a import x\n")},
         ["dragoman.backends.a", "dragoman.backends.b", "dragoman.backends.a"]),
        ({"dragoman.proxy.cli": (False, "from dragoman.proxy import workers\n"), "dragoman.proxy.workers": (False, "from dragoman import config\n"), "dragoman.config": (True, "")},
         None),
        ({"dragoman.backends.p": (True, "from .q import y\n"), "dragoman.backends.p.q": (False, "from .. import p\n")},
         ["dragoman.backends.p", "dragoman.backends.p.q", "dragoman.backends.p"]),
    ],
)
def test_the_cycle_check_follows_relative_and_lazy_imports(sources: dict[str, tuple[bool, str]], expected: list[str] | None) -> None:
    """The check itself can fail: a cycle closed by a relative, function-level import is named."""
    assert find_cycle(import_graph(sources)) == expected


# ---- the ONNX worker's process boundary --------------------------------------------
# onnx/worker/ is what runs inside a model's worker process; the server side (onnx/ but
# worker/, and the rest of dragoman) talks to it only in the pipe's frames, so it imports
# none of it, and the worker imports of the server side only what both sides share.

ONNX = "dragoman.backends.onnx"
WORKER = f"{ONNX}.worker"
# What both processes import: the pipe's messages, the sampling plan the Start command
# carries, the provider probe, and the tokenizer readers.
SHARED = frozenset(f"{ONNX}.{name}" for name in ("worker_protocol", "sampling_plan", "providers", "vocab", "prompt_tokens"))


def in_worker(module: str) -> bool:
    return module == WORKER or module.startswith(f"{WORKER}.")


def boundary_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Each import across the worker's process boundary: a module outside onnx/worker/
    importing one inside, or one inside importing a server-side onnx module it does not share."""
    crossings = []
    for importer, imported in sorted((a, b) for a, found in graph.items() for b in found):
        if not in_worker(importer) and in_worker(imported):
            crossings.append(f"{importer} imports the worker's {imported}")
        elif in_worker(importer) and imported.startswith(f"{ONNX}.") and not in_worker(imported) and imported not in SHARED:
            crossings.append(f"{importer} imports the server side's {imported}")
    return crossings


def test_the_worker_and_the_server_meet_only_in_what_they_share() -> None:
    assert boundary_crossings(import_graph(project_sources())) == []


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({f"{ONNX}.backend": (False, "def f():\n    from dragoman.backends.onnx.worker.sampler import Sampler\n"), f"{WORKER}.sampler": (False, "")},
         [f"{ONNX}.backend imports the worker's {WORKER}.sampler"]),
        ({"dragoman.proxy.cli": (False, "from dragoman.backends.onnx import worker\n"), WORKER: (True, "")},
         [f"dragoman.proxy.cli imports the worker's {WORKER}"]),
        ({f"{WORKER}.loop": (False, "from ..settings import OnnxSettings\n"), f"{ONNX}.settings": (False, "")},
         [f"{WORKER}.loop imports the server side's {ONNX}.settings"]),
        ({f"{WORKER}.loop": (False, "from dragoman.backends.onnx.worker_protocol import Start\nfrom .sampler import Sampler\n"),
          f"{ONNX}.client": (False, "from dragoman.backends.onnx.worker_protocol import Start\n"),
          f"{ONNX}.worker_protocol": (False, ""), f"{WORKER}.sampler": (False, "")},
         []),
    ],
)
def test_the_boundary_check_can_fail(sources: dict[str, tuple[bool, str]], expected: list[str]) -> None:
    """The check itself can fail: a lazy server-side import of a worker module, the worker
    package imported whole, and a relative import from the worker up into the server side are named."""
    assert boundary_crossings(import_graph(sources)) == expected


# ---- one installed name ------------------------------------------------------------
# pip installs dragoman alone (pyproject.toml); a bare ``import proxy`` or ``config`` would
# find PyPI's packages of those names, or nothing, once installed.

OLD_NAMES = frozenset({"proxy", "adapters", "backends", "config"})


def bare_imports(sources: dict[str, str]) -> list[str]:
    """Each absolute import in ``sources`` of a layer by its old top-level name."""
    found = []
    for name, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            found += [f"{name}:{node.lineno} imports {top}" for top in tops if top in OLD_NAMES]
    return sorted(found)


def test_nothing_imports_the_layers_by_their_bare_names() -> None:
    files = [p for folder in ("dragoman", "tests", "bench") for p in sorted((ROOT / folder).rglob("*.py"))]
    sources = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in files}
    assert bare_imports(sources) == []


def test_the_bare_name_check_can_fail() -> None:
    assert bare_imports({"probe.py": "import config\nfrom proxy.app import x\nfrom dragoman import backends\n"}) == [
        "probe.py:1 imports config", "probe.py:2 imports proxy"]
