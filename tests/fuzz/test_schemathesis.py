"""schemathesis against the OpenAPI document the server serves: bounded, reproducible.

Every operation: never a 5xx. Where the document is precise, the answer must match it:
status codes, media types and bodies. The chat routes also get bodies aimed at a served
model, so real replies (not only 404s) are checked against the documented shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

from tests.support.server import RunningServer

MAX_EXAMPLES = 25

# Streaming replies are `text/event-stream` / NDJSON, which the document mentions only in
# words (one media type per status), so the chat routes skip the media-type check.
EVERYTHING = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_schema_conformance,
]
CHAT = [st_checks.not_a_server_error, st_checks.status_code_conformance, st_checks.response_schema_conformance]
# The admin endpoints answer 501 by design (models are configured in the YAML file).
ADMIN = [st_checks.status_code_conformance, st_checks.content_type_conformance, st_checks.response_schema_conformance]
BOTH = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
POSITIVE = (GenerationMode.POSITIVE,)  # nothing to get wrong: no parameters, no body

OPERATIONS: list[tuple[str, str, tuple[GenerationMode, ...], list[Callable[..., Any]], str | None]] = [
    # (method, path, generation modes, checks, model to aim bodies at)
    ("POST", "/v1/chat/completions", BOTH, CHAT, "scripted"),
    ("POST", "/api/chat", BOTH, CHAT, "scripted"),
    ("POST", "/api/generate", BOTH, CHAT, "scripted"),
    ("POST", "/v1/completions", BOTH, CHAT, "scripted"),
    ("POST", "/v1/messages", BOTH, CHAT, "scripted"),
    ("POST", "/v1/messages/count_tokens", BOTH, EVERYTHING, "scripted"),
    ("POST", "/v1/responses", BOTH, CHAT, "scripted"),
    ("GET", "/v1/responses/{response_id}", POSITIVE, EVERYTHING, None),
    ("DELETE", "/v1/responses/{response_id}", POSITIVE, EVERYTHING, None),
    ("GET", "/v1/responses/{response_id}/input_items", POSITIVE, EVERYTHING, None),
    ("POST", "/v1/responses/{response_id}/cancel", POSITIVE, EVERYTHING, None),
    ("POST", "/v1/responses/input_tokens", BOTH, EVERYTHING, "scripted"),
    ("POST", "/v1/responses/compact", BOTH, EVERYTHING, "scripted"),
    ("POST", "/v1/chat/completions/input_tokens", BOTH, EVERYTHING, "scripted"),
    ("POST", "/v1/conversations", BOTH, EVERYTHING, None),
    ("GET", "/v1/conversations/{conversation_id}", POSITIVE, EVERYTHING, None),
    ("POST", "/v1/conversations/{conversation_id}", BOTH, EVERYTHING, None),
    ("DELETE", "/v1/conversations/{conversation_id}", POSITIVE, EVERYTHING, None),
    ("GET", "/v1/conversations/{conversation_id}/items", POSITIVE, EVERYTHING, None),
    ("POST", "/v1/conversations/{conversation_id}/items", BOTH, EVERYTHING, None),
    ("GET", "/v1/conversations/{conversation_id}/items/{item_id}", POSITIVE, EVERYTHING, None),
    ("DELETE", "/v1/conversations/{conversation_id}/items/{item_id}", POSITIVE, EVERYTHING, None),
    ("POST", "/api/show", BOTH, EVERYTHING, "scripted"),
    ("POST", "/api/pull", BOTH, CHAT, "scripted"),
    ("DELETE", "/api/delete", BOTH, EVERYTHING, None),  # the names it makes up are built nowhere: 400/404
    ("POST", "/api/copy", BOTH, EVERYTHING, None),
    ("POST", "/api/create", POSITIVE, ADMIN, None),
    ("POST", "/api/push", POSITIVE, ADMIN, None),
    ("POST", "/api/blobs/{digest}", POSITIVE, ADMIN, None),
    ("HEAD", "/api/blobs/{digest}", POSITIVE, ADMIN, None),
    ("POST", "/api/embed", BOTH, EVERYTHING, "scripted"),
    ("POST", "/api/embeddings", BOTH, EVERYTHING, "scripted"),
    ("POST", "/v1/embeddings", BOTH, EVERYTHING, "scripted"),
    ("GET", "/v1/models/{model}", POSITIVE, EVERYTHING, None),
    ("GET", "/v1/models", POSITIVE, EVERYTHING, None),
    ("GET", "/api/tags", POSITIVE, EVERYTHING, None),
    ("GET", "/api/ps", POSITIVE, EVERYTHING, None),
    ("GET", "/api/version", POSITIVE, EVERYTHING, None),
    ("GET", "/health/live", POSITIVE, EVERYTHING, None),
    ("GET", "/health/ready", POSITIVE, EVERYTHING, None),
]


@pytest.fixture(scope="module", autouse=True)
def empty_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """/api/delete and /api/copy work on DRAGOMAN_HOME's builds: here an empty one, never
    the machine's own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAGOMAN_HOME", str(tmp_path_factory.mktemp("home")))
        yield


@pytest.fixture(scope="module")
def api(scripted_server: RunningServer) -> Any:
    return schemathesis.openapi.from_url(scripted_server.url + "/schema/openapi.json")


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as http:
        yield http


def test_every_documented_operation_is_exercised(api: Any) -> None:
    documented = {(op.ok().method.upper(), op.ok().path) for op in api.get_all_operations()}
    assert documented == {(method, path) for method, path, *_ in OPERATIONS}


def aimed_at(model: str | None) -> Callable[[Any], Any]:
    """Half the JSON-object bodies name a served model, so replies get past the 404."""

    def aim(pair: tuple[Any, bool]) -> Any:
        case, aim_it = pair
        if model is not None and aim_it and isinstance(case.body, dict):
            case.body["model"] = model
        return case

    return aim


@pytest.mark.parametrize(
    ("method", "path", "modes", "checks", "model"), OPERATIONS, ids=[f"{m} {p}" for m, p, *_ in OPERATIONS]
)
def test_operation_conforms(
    api: Any, session: requests.Session, scripted_server: RunningServer, method: str, path: str,
    modes: tuple[GenerationMode, ...], checks: list[Callable[..., Any]], model: str | None,
) -> None:
    operation = api[path][method]
    for mode in modes:
        cases = st.tuples(operation.as_strategy(generation_mode=mode), st.booleans()).map(aimed_at(model))

        @settings(
            max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(case=cases)
        def call(case: Any) -> None:
            response = case.call(base_url=scripted_server.url, session=session, timeout=10)
            case.validate_response(response, checks=checks)

        call()


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


WEATHER_TOOL = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]

# Random bodies rarely get a whole reply; these do, and every documented status with them.
REPLIES: list[tuple[str, str, dict[str, Any], int]] = [
    ("openai text", "/v1/chat/completions", {"model": "scripted", "messages": user("hi")}, 200),
    ("openai tool calls", "/v1/chat/completions", {"model": "scripted", "messages": user("script:tools"), "tools": WEATHER_TOOL}, 200),
    ("openai thinking", "/v1/chat/completions", {"model": "scripted", "messages": user("script:think")}, 200),
    ("openai cut short", "/v1/chat/completions", {"model": "scripted", "messages": user("script:length")}, 200),
    ("openai n choices", "/v1/chat/completions", {"model": "scripted", "messages": user("hi"), "n": 2}, 200),
    ("openai bad field", "/v1/chat/completions", {"model": "scripted", "messages": user("hi"), "n": 99}, 400),
    ("openai unknown model", "/v1/chat/completions", {"model": "nope", "messages": user("hi")}, 404),
    ("openai backend failed", "/v1/chat/completions", {"model": "scripted", "messages": user("script:fail-before")}, 502),
    ("openai busy", "/v1/chat/completions", {"model": "scripted", "messages": user("script:busy")}, 503),
    ("ollama text", "/api/chat", {"model": "scripted", "messages": user("hi"), "stream": False}, 200),
    ("ollama tool calls", "/api/chat", {"model": "scripted", "messages": user("script:tools"), "tools": WEATHER_TOOL, "stream": False}, 200),
    ("ollama thinking", "/api/chat", {"model": "scripted", "messages": user("script:think"), "think": True, "stream": False}, 200),
    ("ollama load", "/api/chat", {"model": "scripted", "messages": [], "stream": False}, 200),
    ("ollama bad field", "/api/chat", {"model": "scripted", "messages": user("hi"), "think": "max"}, 400),
    ("ollama unknown model", "/api/chat", {"model": "nope", "messages": user("hi")}, 404),
    ("ollama backend failed", "/api/chat", {"model": "scripted", "messages": user("script:fail-before")}, 502),
    ("ollama busy", "/api/chat", {"model": "scripted", "messages": user("script:busy")}, 503),
    ("anthropic text", "/v1/messages", {"model": "scripted", "max_tokens": 8, "messages": user("hi")}, 200),
    ("anthropic thinking", "/v1/messages", {"model": "scripted", "max_tokens": 8, "messages": user("script:think")}, 200),
    ("anthropic tool use", "/v1/messages", {"model": "scripted", "max_tokens": 8, "messages": user("script:tools"),
                                            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}, 200),
    ("anthropic bad field", "/v1/messages", {"model": "scripted", "messages": user("hi")}, 400),
    ("anthropic unknown model", "/v1/messages", {"model": "nope", "max_tokens": 8, "messages": user("hi")}, 404),
    ("anthropic backend failed", "/v1/messages", {"model": "scripted", "max_tokens": 8, "messages": user("script:fail-before")}, 502),
    ("anthropic busy", "/v1/messages", {"model": "scripted", "max_tokens": 8, "messages": user("script:busy")}, 529),
    ("anthropic count without tokenizer", "/v1/messages/count_tokens", {"model": "scripted", "messages": user("hi")}, 400),
    ("responses text", "/v1/responses", {"model": "scripted", "input": "hi"}, 200),
    ("responses thinking", "/v1/responses", {"model": "scripted", "input": "script:think"}, 200),
    ("responses function calls", "/v1/responses", {"model": "scripted", "input": "script:tools",
                                                   "tools": [{"type": "function", "name": "get_weather"}]}, 200),
    ("responses cut short", "/v1/responses", {"model": "scripted", "input": "script:length"}, 200),
    ("responses bad field", "/v1/responses", {"model": "scripted", "input": "hi", "prompt": {"id": "pmpt_1"}}, 400),
    ("responses unknown previous", "/v1/responses", {"model": "scripted", "input": "hi", "previous_response_id": "resp_x"}, 404),
    ("responses backend failed", "/v1/responses", {"model": "scripted", "input": "script:fail-before"}, 502),
    ("responses busy", "/v1/responses", {"model": "scripted", "input": "script:busy"}, 503),
    ("show", "/api/show", {"model": "scripted"}, 200),
    ("show without a model", "/api/show", {}, 400),
    ("show unknown model", "/api/show", {"model": "nope"}, 404),
]


@pytest.mark.parametrize(("name", "path", "body", "status"), REPLIES, ids=[r[0] for r in REPLIES])
def test_replies_conform_to_the_document(
    api: Any, session: requests.Session, scripted_server: RunningServer, name: str, path: str, body: dict[str, Any], status: int
) -> None:
    case = api[path]["POST"].Case(body=body, media_type="application/json")
    response = case.call(base_url=scripted_server.url, session=session, timeout=10)
    assert response.status_code == status, response.text
    case.validate_response(response, checks=[*EVERYTHING[1:]])
