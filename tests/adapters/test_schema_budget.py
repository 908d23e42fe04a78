"""The static schema budget: what it refuses (naming the place and the limit) and
what real schemas it lets through."""

from __future__ import annotations

from typing import Any

import pytest

from dragoman.adapters.schema_budget import SchemaBudget, SchemaTooComplex, check_schemas

BUDGET = SchemaBudget()


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


REFUSED: list[tuple[str, Any, str, str]] = [
    ("minItems", {"type": "array", "items": {"type": "integer"}, "minItems": 100_000_000},
     "format.minItems is 1e+08", "max_count"),
    ("maxItems deep inside", {"type": "object", "properties": {"a": {"type": "array", "maxItems": 10**9}}},
     "format.properties.a.maxItems", "max_count"),
    ("minLength", {"type": "string", "minLength": 200_000}, "format.minLength", "max_count"),
    ("wide anyOf", {"anyOf": [{"const": i} for i in range(3000)]}, "format.anyOf has 3000 branches", "max_branches"),
    ("anyOf of anyOf", {"anyOf": [{"anyOf": [{"const": j} for j in range(100)]} for _ in range(100)]},
     "past the limit for the request", "max_total_branches"),
    ("long pattern", {"type": "string", "pattern": "a" * 5000}, "format.pattern is 5000 characters",
     "max_pattern_length"),
    ("many patterns", {"type": "object", "properties": {f"p{i}": {"pattern": "a+"} for i in range(100)}},
     "one regex too many", "max_patterns"),
    ("patternProperties count", {"patternProperties": {f"^a{i}$": {} for i in range(100)}}, "regex too many",
     "max_patterns"),
    ("deep", nested(40), "is nested 33 subschemas deep", "max_depth"),
    ("too many nodes", {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(20_000)}},
     "holds more subschemas than allowed", "max_nodes"),
    ("a huge description", {"type": "object", "description": "😀" * 600_000}, "bytes of JSON", "max_bytes"),
    ("many enum values", {"enum": list(range(5000))}, "format.enum brings the enum values", "max_enum_values"),
]


@pytest.mark.parametrize(("name", "schema", "where", "limit"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused(name: str, schema: Any, where: str, limit: str) -> None:
    with pytest.raises(SchemaTooComplex) as info:
        check_schemas([("format", schema)], BUDGET)
    assert where in info.value.message and f"server.limits.schema.{limit}" in info.value.message
    assert info.value.status == 400 and info.value.param == "format"
    assert str(getattr(BUDGET, limit)) in info.value.message


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city", "maxLength": 100},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 10},
    },
    "required": ["city"],
    "additionalProperties": False,
    "$defs": {"point": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}}},
}


def test_real_schemas_pass() -> None:
    # An agent's twenty tools, forced together, and OpenAI's limits at their edge.
    check_schemas([(f"tools[{i}].function.parameters", WEATHER) for i in range(20)], BUDGET)
    check_schemas([("format", nested(10))], BUDGET)
    check_schemas([("format", {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(4000)}})],
                  BUDGET)  # fmt: skip
    check_schemas([("format", {"enum": [f"value {i}" for i in range(1000)]})], BUDGET)
    check_schemas([("format", True)], BUDGET)


def test_schemas_of_one_request_share_the_budget() -> None:
    tool = {"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(2000)}}
    check_schemas([("tools[0].function.parameters", tool)], BUDGET)
    with pytest.raises(SchemaTooComplex, match=r"tools\[2\]\.function\.parameters holds more"):
        check_schemas([(f"tools[{i}].function.parameters", tool) for i in range(3)], BUDGET)


def test_a_configured_budget_applies() -> None:
    with pytest.raises(SchemaTooComplex, match=r"format\.properties\.city\.maxLength is 100; the limit is 50"):
        check_schemas([("format", WEATHER)], SchemaBudget(max_count=50))
