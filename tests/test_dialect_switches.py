"""proxy/ holds no per-dialect switch: what differs between dialects lives on each adapter
package's ``DIALECT`` (adapters/dialect.py). Read from the source with ``ast``: a
comparison against a dialect's name, or a dict keyed by dialect names, fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dragoman.adapters.dialects import DIALECTS, dialect_for_path

pytestmark = pytest.mark.unit

PROXY = Path(__file__).resolve().parent.parent / "dragoman" / "proxy"
NAMES = frozenset({"openai", "ollama", "anthropic", "responses"})

# (file, line text) that must stay, with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    # GET /v1/models is OpenAI's route; an anthropic SDK client on it gets Anthropic's
    # page shape: a route choosing its reply, not a dialect property.
    ("openai_routes.py", 'if record.dialect == "anthropic":'): "models listing answers an anthropic client in its shape",
}


def _switches(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    lines = path.read_text().splitlines()
    found: list[tuple[int, str]] = []

    def named(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and (named(node.left) or any(named(c) for c in node.comparators)):
            found.append((node.lineno, lines[node.lineno - 1].strip()))
        elif isinstance(node, ast.Dict) and any(named(k) for k in node.keys):
            found.append((node.lineno, lines[node.lineno - 1].strip()))
        elif isinstance(node, ast.MatchValue) and named(node.value):
            found.append((node.lineno, lines[node.lineno - 1].strip()))
    return sorted(found)


def test_proxy_compares_nothing_against_a_dialect_name() -> None:
    found = [
        f"{path.name}:{line}: {text}"
        for path in sorted(PROXY.glob("*.py"))
        for line, text in _switches(path)
        if (path.name, text) not in ALLOWED
    ]
    assert not found, "per-dialect switches in proxy/ (put the difference on Dialect):\n" + "\n".join(found)


def test_the_scan_finds_a_switch(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text('a = 1 if d == "ollama" else 2\nb = {"anthropic": 1}\nc = d in ("openai", "x")\nmatch d:\n    case "responses":\n        pass\n')
    assert [line for line, _ in _switches(source)] == [1, 2, 3, 5]


@pytest.mark.parametrize(
    ("path", "headers", "name"),
    [
        ("/v1/chat/completions", (), "openai"),
        ("/v1/models", (), "openai"),
        ("/v1/models", ("Anthropic-Version",), "anthropic"),
        ("/v1/messages", (), "anthropic"),
        ("/v1/messages/count_tokens", (), "anthropic"),
        ("/v1/responses", (), "responses"),
        ("/v1/responses/resp_1/input_items", ("anthropic-version",), "responses"),
        ("/api/chat", (), "ollama"),
        ("/api/tags", ("anthropic-version",), "ollama"),
        ("/", (), "ollama"),
        ("", (), "ollama"),
    ],
)
def test_dialect_for_path(path: str, headers: tuple[str, ...], name: str) -> None:
    assert dialect_for_path(path, headers).name == name


def test_every_dialect_is_registered_once() -> None:
    assert sorted(d.name for d in DIALECTS) == sorted(NAMES)
