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

# (file, line text) that must stay, with the reason. None today: the last one (the
# /v1/models listing in Anthropic's shape) is Dialect.model_listing now.
ALLOWED: dict[tuple[str, str], str] = {}


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


# Functions that start a chat and answer it their own way, with the reason. Every other
# one answers through proxy.chat.answer (the one skeleton: stream or aggregate).
OWN_ANSWER: dict[tuple[str, str], str] = {
    ("completion_routes.py", "completions_route"): "one reply of several prompts, answered in turn",
    ("completion_routes.py", "_choices"): "one reply of several prompts, answered in turn",
    ("choices.py", "start_choices"): "n choices merged into one reply",
    ("compaction_routes.py", "compact_response"): "the summary becomes a compaction item, not the chat's reply",
    ("auto_compaction.py", "compact_if_over"): "the summary becomes a compaction item, not the chat's reply",
    ("background.py", "_run"): "frames go to the run's buffer, read back by GET /v1/responses/{id}",
}


def _chat_answers(path: Path) -> list[tuple[str, set[str]]]:
    """(function, names it calls) for each function in ``path`` that calls start_chat."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            if "start_chat" in calls:
                found.append((node.name, calls))
    return found


def test_chat_routes_answer_through_one_skeleton() -> None:
    own = [
        f"{path.name}:{name}"
        for path in sorted(PROXY.glob("*.py"))
        for name, calls in _chat_answers(path)
        if "answer" not in calls and (path.name, name) not in OWN_ANSWER
    ]
    assert not own, "chat handlers answering without proxy.chat.answer:\n" + "\n".join(own)
    seen = {(path.name, name) for path in PROXY.glob("*.py") for name, _ in _chat_answers(path)}
    assert seen >= OWN_ANSWER.keys(), f"stale OWN_ANSWER entries: {OWN_ANSWER.keys() - seen}"
    answering = {name for (_, name) in seen} - {name for (_, name) in OWN_ANSWER}
    assert {"chat_completions", "messages", "chat", "generate_route", "create_response"} <= answering


def test_the_skeleton_scan_finds_its_own_answer(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "async def mine(m, c):\n    chat = await start_chat(m, c)\n    return Stream(encode_stream(chat))\n"
        "async def shared(m, c):\n    return await answer(await start_chat(m, c))\n"
    )
    assert [(name, "answer" in calls) for name, calls in _chat_answers(source)] == [("mine", False), ("shared", True)]


def test_every_dialect_is_registered_once() -> None:
    assert sorted(d.name for d in DIALECTS) == sorted(NAMES)
