"""A static budget for the JSON schemas a request asks a backend to compile.

Structured output (``response_format`` / Ollama's ``format``) and forced tool calls
(``tool_choice`` required or a named function: the tools' ``parameters``) become
grammars, and what a grammar costs to build grows with the schema: repetition counts
(``minItems``, ``maxLength`` …) may be unrolled, every ``anyOf`` branch is an
alternative the parser tracks at once (llguidance's parser stops past 2,000 in one
row), every ``pattern`` is a regex to compile, an ``allOf`` of patterns is their
intersection. This walks the schema once, before any work, and refuses one that is
beyond the budget with a 400 naming the field, the place in the schema and the
limit. The defaults are at or beyond what real clients can send (OpenAI's structured
outputs allow 5,000 properties, 10 levels, 1,000 enum values in all); what passes
still meets the worker's own compile-time bounds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from dragoman.adapters.errors import RequestError

MiB = 1024 * 1024


class SchemaBudget(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``server.limits.schema``: bounds on the schemas one request compiles."""

    max_bytes: int = 1 * MiB  # the schemas' JSON
    max_nodes: int = 5000  # subschemas in all (compiling 4,000 optional properties took 1.8 s)
    max_depth: int = 32  # subschemas inside subschemas
    max_branches: int = 256  # subschemas of one anyOf / oneOf / allOf, types of one type list
    max_total_branches: int = 1024  # those, summed over the request
    max_enum_values: int = 4096  # enum values, summed
    max_patterns: int = 64  # pattern and patternProperties regexes
    max_pattern_length: int = 1000  # characters of one regex
    max_count: int = 100_000  # minItems, maxItems, minLength, maxLength, min/maxProperties, min/maxContains


class SchemaTooComplex(RequestError):
    code = "schema_too_complex"


_COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties", "minContains", "maxContains")
_BRANCHES = ("anyOf", "oneOf", "allOf")
_SCHEMA_LISTS = (*_BRANCHES, "prefixItems", "items")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = (
    "items", "additionalItems", "additionalProperties", "contains", "propertyNames", "not", "if", "then", "else",
    "unevaluatedItems", "unevaluatedProperties",
)  # fmt: skip


class _Walk:
    def __init__(self, budget: SchemaBudget) -> None:
        self.budget = budget
        self.nodes = self.branches = self.enum_values = self.patterns = self.bytes = 0

    def schema(self, field: str, schema: Any) -> None:
        budget = self.budget
        stack: list[tuple[Any, tuple[str, ...], int]] = [(schema, (), 1)]
        while stack:
            node, path, depth = stack.pop()
            self.nodes += 1
            if self.nodes > budget.max_nodes:
                self._refuse(field, (), "holds more subschemas than allowed", "max_nodes")
            if depth > budget.max_depth:
                self._refuse(field, path, f"is nested {depth} subschemas deep", "max_depth")
            if not isinstance(node, dict):
                continue  # true / false, or not a schema (the compiler says so)
            self._limits_of(node, field, path)
            for key in _SCHEMA_ONE:
                child = node.get(key)
                if isinstance(child, dict | bool):
                    stack.append((child, (*path, key), depth + 1))
            for key in _SCHEMA_LISTS:
                children = node.get(key)
                if isinstance(children, list):
                    stack.extend((c, (*path, f"{key}[{i}]"), depth + 1) for i, c in enumerate(children))
            for key in _SCHEMA_MAPS:
                children = node.get(key)
                if isinstance(children, dict):
                    stack.extend((c, (*path, key, str(name)), depth + 1) for name, c in children.items())
        try:
            self.bytes += len(msgspec.json.encode(schema))
        except (RecursionError, TypeError, OverflowError):
            raise SchemaTooComplex(f"{field}: cannot be encoded as JSON", param=field) from None
        if self.bytes > budget.max_bytes:
            self._refuse(field, (), f"is {self.bytes} bytes of JSON", "max_bytes")

    def _limits_of(self, node: dict[str, Any], field: str, path: tuple[str, ...]) -> None:
        budget = self.budget
        for key in _COUNTS:
            value = node.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > budget.max_count:
                self._refuse(field, (*path, key), f"is {value:g}", "max_count")
        for key in _BRANCHES:
            if isinstance(node.get(key), list):
                self._branches(len(node[key]), field, (*path, key))
        if isinstance(node.get("type"), list):
            self._branches(len(node["type"]), field, (*path, "type"))
        if isinstance(node.get("enum"), list):
            self.enum_values += len(node["enum"])
            if self.enum_values > budget.max_enum_values:
                self._refuse(field, (*path, "enum"), "brings the enum values past the limit", "max_enum_values")
        regexes = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            regexes += [str(k) for k in node["patternProperties"]]
        for regex in regexes:
            self.patterns += 1
            if self.patterns > budget.max_patterns:
                self._refuse(field, (*path, "pattern"), "is one regex too many", "max_patterns")
            if len(regex) > budget.max_pattern_length:
                self._refuse(field, (*path, "pattern"), f"is {len(regex)} characters", "max_pattern_length")

    def _branches(self, count: int, field: str, path: tuple[str, ...]) -> None:
        if count > self.budget.max_branches:
            self._refuse(field, path, f"has {count} branches", "max_branches")
        self.branches += count
        if self.branches > self.budget.max_total_branches:
            self._refuse(field, path, "brings the branches past the limit for the request", "max_total_branches")

    def _refuse(self, field: str, path: tuple[str, ...], what: str, limit_name: str) -> None:
        where = ".".join((field, *path))
        raise SchemaTooComplex(
            f"{where} {what}; the limit is {getattr(self.budget, limit_name)} (server.limits.schema.{limit_name}); "
            "simplify the schema",
            param=field,
        )


def check_schemas(schemas: Iterable[tuple[str, Any]], budget: SchemaBudget) -> None:
    """``schemas``: (the field as the client wrote it, the schema) for every schema one
    request compiles into one grammar; they share the budget."""
    walk = _Walk(budget)
    for field, schema in schemas:
        walk.schema(field, schema)
