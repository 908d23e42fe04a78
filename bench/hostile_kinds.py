"""The hostile requests of ``bench/hostile.py``, one or more per row of issue #9: a name,
the row, the request (path and body, given the victims' model name), the answer a client
must get (status, and words its headers and body must hold; ``!word``: must not), and for
the upstream and image kinds of ``bench/hostile_peers.py`` the model entries they need.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hostile_peers

MiB = 1024 * 1024


@dataclass(frozen=True)
class Kind:
    name: str
    row: str  # the row it reproduces
    request: Callable[[str], tuple[str, Any]]  # model name -> (path, body: JSON, or its bytes)
    expected: tuple[int, tuple[str, ...]]  # the status a client must get, words its answer must hold ("!word": not)
    config: str = ""  # extra model entries (YAML list items, then maybe a server: block)
    peers: bool = False  # needs hostile_peers' process; config is formatted with its URLs


def letters(kib: int) -> str:
    """Random letters without whitespace (a periodic run tokenises quickly even where a
    random one does not)."""
    return "".join(random.Random(9).choices(string.ascii_letters, k=kib * 1024))


def _chat(model: str, **body: Any) -> tuple[str, dict[str, Any]]:
    return "/api/chat", {
        "model": model, "stream": False, "messages": [{"role": "user", "content": "Hi"}],
        "options": {"num_predict": 8}, **body,
    }  # fmt: skip


def _nested(model: str, levels: int) -> tuple[str, bytes]:
    """A chat whose ``format`` nests ``levels`` deep, as bytes: json.dumps cannot write it."""
    head = json.dumps({"model": model, "stream": False, "messages": [{"role": "user", "content": "Hi"}]})
    return "/api/chat", (head[:-1] + ', "format": ' + "[" * levels + "]" * levels + "}").encode()


def _forced_tool(model: str) -> tuple[str, dict[str, Any]]:
    parameters = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"},
                                                          "minItems": 100_000_000}}}  # fmt: skip
    return "/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
    }  # fmt: skip


SCHEMA = "server.limits.schema"
KINDS: list[Kind] = [
    Kind("schema minItems 1e8", "1", lambda m: _chat(m, format={"type": "array", "items": {"type": "integer"},
                                                                "minItems": 100_000_000}),
         (400, ("format.minItems", f"{SCHEMA}.max_count"))),  # fmt: skip
    Kind("forced tool, parameters minItems 1e8", "1", _forced_tool, (400, ("tools[0].function.parameters", "max_count"))),
    Kind("allOf of 20 patterns", "1", lambda m: _chat(m, format={"allOf": [
        {"type": "string", "pattern": f".*{c}.*"} for c in "abcdefghijklmnopqrst"]}), (400, ("grammar",))),  # fmt: skip
    Kind("anyOf of 3000", "1", lambda m: _chat(m, format={"anyOf": [
        {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
        for i in range(3000)]}), (400, ("format.anyOf", f"{SCHEMA}.max_branches"))),  # fmt: skip
    Kind("512 KiB of letters without whitespace", "2", lambda m: _chat(m, messages=[
        {"role": "user", "content": letters(512)}]), (400, ("prompt", "context length"))),  # fmt: skip
    Kind("a 1000-token prompt", "2", lambda m: _chat(m, messages=[{"role": "user", "content": " ".join(
        ["the quick brown fox jumps over the lazy dog"] * 105)}], options={"num_predict": 1}), (200, ("message",))),  # fmt: skip
    Kind("24 MB schema description", "3", lambda m: _chat(m, format={"type": "object", "description": "😀" * 6_000_000}),
         (400, ("format", f"{SCHEMA}.max_bytes"))),
    Kind("a million stop strings", "4", lambda m: _chat(m, options={"num_predict": 8, "stop": [
        f"s{i:010d}" for i in range(1_000_000)]}), (400, ("options.stop", "max_stop"))),  # fmt: skip
    Kind("explicit unload", "5", lambda m: ("/api/chat", {"model": m, "messages": [], "keep_alive": 0}),
         (200, ("unload",))),
    Kind("a 1 MiB model name", "12", lambda m: _chat("m" * MiB), (400, ("model", "max_model_name"))),
    Kind("a body nested 100000 deep", "14", lambda m: _nested(m, 100_000),
         (400, ("nested too deeply",))),
] + [
    Kind(name, row, request, expected, config, peers=True)
    for name, row, request, config, expected in hostile_peers.KINDS
]
