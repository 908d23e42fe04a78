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
