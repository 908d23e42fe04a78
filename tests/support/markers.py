"""Which tests are ``unit`` and which are ``real_model``, decided from what each test uses.

``real_model``: the test's fixtures reach (directly or through other fixtures) one that
builds or loads the real test model (:data:`REAL_MODEL_FIXTURES`), or the test reaches
the model some other way and says so with ``@pytest.mark.real_model``.

``unit``: not ``real_model``, and neither the test's module nor the module defining any
of its fixtures starts a server, a listener or a process: none of them imports
:data:`HEAVY_MODULES`, calls one of :data:`HEAVY_CALLS`, or imports from a ``tests``
module that does (apart from the plain values in :data:`PURE_NAMES`). The rule is
checked while the tests run: a ``unit`` test that listens on a socket or starts a
process fails (tests/support/isolation.py).

Everything else (stand-in upstreams, the scripted server, browsers, processes) carries
neither marker: ``-m "not real_model"`` runs it without the model.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

REAL_MODEL_FIXTURES = frozenset({
    "model_home", "model_dir", "real_server", "embedding_model_dir", "fim_model_dir", "fim_server",
    "smollm2_source", "smollm2_gguf",  # tests/ctransformers/conftest.py
})
HEAVY_MODULES = frozenset({
    "subprocess", "socket", "multiprocessing", "http.server", "socketserver", "uvicorn", "playwright", "torch",
})
HEAVY_CALLS = frozenset({"start_server", "create_server", "create_subprocess_exec", "create_subprocess_shell", "fork"})
# The plugin holding unit tests to their marker imports socket and subprocess to refuse them.
GUARDS = frozenset({"tests.support.isolation"})
# Values that may be imported from a heavy helper without starting anything.
PURE_NAMES: dict[str, frozenset[str]] = {
    "tests.support.server": frozenset({"config_from_yaml", "RunningServer"}),
    "tests.support.replay": frozenset({"Reply", "TRANSCRIPTS"}),
    "tests.conftest": frozenset({"SCRIPTED_CONFIG"}),
}


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """(module, names imported from it; [] for a plain ``import``) of every absolute import."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _calls_heavy(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr in HEAVY_CALLS for node in ast.walk(tree))


def _source_file(module: str) -> Path | None:
    """The file of one of this repository's test modules, else None (product code and
    libraries are judged by what the tests do with them, not scanned)."""
    if module != "tests" and not module.startswith("tests."):
        return None
    base = TESTS.parent / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def heavy_module(module: str) -> bool:
    """Whether a ``tests`` module starts servers, listeners or processes (or imports
    something that does)."""
    source = _source_file(module)
    if source is None:
        return False
    tree = ast.parse(source.read_text(), str(source))
    if _calls_heavy(tree):
        return True
    for imported, names in _imports(tree):
        if imported in HEAVY_MODULES or imported.split(".")[0] in HEAVY_MODULES:
            return True
        if imported == module or not heavy_module(imported):
            continue
        if not names or not set(names) <= PURE_NAMES.get(imported, frozenset()):
            return True
    return False


def _fixture_modules(item: pytest.Item) -> set[str]:
    """The modules defining every fixture the test uses, through other fixtures too."""
    definitions = item._fixtureinfo.name2fixturedefs  # type: ignore[attr-defined]
    return {d.func.__module__ for name in item.fixturenames for d in definitions.get(name, ())} - GUARDS


def classify(item: pytest.Item) -> str | None:
    """``"real_model"``, ``"unit"`` or None (a server, a stand-in or a process)."""
    if REAL_MODEL_FIXTURES & set(item.fixturenames) or item.get_closest_marker("real_model") is not None:
        return "real_model"
    if not isinstance(item, pytest.Function):  # generated elsewhere (a plugin's items): not judged
        return None
    modules = _fixture_modules(item) | {item.module.__name__}
    return None if any(heavy_module(m) for m in modules) else "unit"


def holds_no_unit_test(path: Path) -> bool:
    """A test module whose every test is unit-less by :func:`classify` (its module is
    heavy): ``-m unit`` need not even import it."""
    if not (path.name.startswith("test_") and path.suffix == ".py" and path.is_relative_to(TESTS)):
        return False
    return heavy_module(".".join(path.relative_to(TESTS.parent).with_suffix("").parts))


def mark(items: list[pytest.Item]) -> None:
    """Adds the marker :func:`classify` gives; a test marked ``unit`` by hand that is not
    one stops the run here, naming it."""
    for item in items:
        kind = classify(item)
        if item.get_closest_marker("unit") is not None and kind != "unit":
            raise pytest.UsageError(f"{item.nodeid} is marked unit but uses a model, server or process ({kind})")
        if kind is not None:
            item.add_marker(kind)
