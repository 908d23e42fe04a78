"""Every error path over real HTTP: status and body shape in the caller's dialect."""

from __future__ import annotations

import json

import httpx
import ollama
import openai
import pytest

from tests.support.server import RunningServer

OPENAI = "/v1/chat/completions"
OLLAMA = "/api/chat"


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


CASES = [
    # (case, path, body (bytes or json), status, message fragment, openai param)
    ("malformed json", OPENAI, b'{"model": "scripted", "messages": [', 400, "not valid JSON", None),
    ("malformed json", OLLAMA, b'{"model": "scripted", ', 400, "not valid JSON", None),
    ("empty body", OPENAI, b"", 400, "request body", None),
    ("empty body", OLLAMA, b"", 400, "request body", None),
    ("body not an object", OPENAI, b"[]", 400, "request body", None),
    ("missing model", OPENAI, {"messages": user("hi")}, 400, "model: field required", "model"),
    ("missing model", OLLAMA, {"messages": user("hi")}, 400, "model: field required", None),
    ("missing messages", OPENAI, {"model": "scripted"}, 400, "messages: field required", "messages"),
    (
        "wrong type deep",
        OPENAI,
        {"model": "scripted", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": 5}]},
        400,
        "messages[1].content",
        "messages[1].content",
    ),
    (
        "wrong type deep",
        OLLAMA,
        {"model": "scripted", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": 5}]},
        400,
        "messages[1].content",
        None,
    ),
    ("wrong option type", OLLAMA, {"model": "scripted", "messages": user("x"), "options": {"temperature": "hot"}}, 400, "options.temperature", None),
    ("bad temperature type", OPENAI, {"model": "scripted", "messages": user("x"), "temperature": "hot"}, 400, "temperature", "temperature"),
    ("unknown model", OPENAI, {"model": "nope", "messages": user("hi")}, 404, "model 'nope' not found", "model"),
    ("unknown model", OLLAMA, {"model": "nope", "messages": user("hi")}, 404, "model 'nope' not found", None),
    ("bad think value", OLLAMA, {"model": "scripted", "messages": user("x"), "think": "max"}, 400, "think", None),
    ("bad reasoning effort", OPENAI, {"model": "scripted", "messages": user("x"), "reasoning_effort": "max"}, 400, "reasoning_effort", "reasoning_effort"),
    ("unsupported feature", OPENAI, {"model": "no-tools", "messages": user("x"), "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "does not support tools", "tools"),
    ("unsupported feature", OLLAMA, {"model": "no-tools", "messages": user("x"), "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "does not support tools", None),
    ("backend failure", OPENAI, {"model": "scripted", "messages": user("script:fail-before")}, 502, "scripted backend failure", None),
    ("backend failure", OLLAMA, {"model": "scripted", "messages": user("script:fail-before")}, 502, "scripted backend failure", None),
    ("backend failure streaming", OPENAI, {"model": "scripted", "stream": True, "messages": user("script:fail-before")}, 502, "scripted backend failure", None),
    ("backend failure streaming", OLLAMA, {"model": "scripted", "messages": user("script:fail-before")}, 502, "scripted backend failure", None),
    ("n over server.limits.max_choices", OPENAI, {"model": "scripted", "messages": user("x"), "n": 9}, 400, "server.limits.max_choices", "n"),
    ("n zero", OPENAI, {"model": "scripted", "messages": user("x"), "n": 0}, 400, "n: must be at least 1", "n"),
    ("return_progress where the backend reports none", OPENAI, {"model": "scripted", "messages": user("x"), "stream": True, "return_progress": True},
     400, "does not report how far", "return_progress"),
    ("logit_bias where the backend has none", OPENAI, {"model": "scripted", "messages": user("x"), "logit_bias": {"5": -100}},
     400, "cannot bias token ids", "logit_bias"),
]


@pytest.mark.parametrize(
    ("case", "path", "body", "status", "fragment", "param"), CASES, ids=[f"{c[0]}-{'openai' if c[1] == OPENAI else 'ollama'}" for c in CASES]
)
def test_error_status_and_shape(
    scripted_server: RunningServer, case: str, path: str, body: object, status: int, fragment: str, param: str | None
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(scripted_server.url + path, content=content, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    if path == OPENAI:
        error = payload["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert fragment in error["message"]
        assert error["type"] == {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
        if param is not None:
            assert error["param"] == param
    else:
        assert set(payload) == {"error"}
        assert isinstance(payload["error"], str)
        assert fragment in payload["error"]
    assert "Traceback" not in response.text


def test_overloaded_sets_retry_after(scripted_server: RunningServer) -> None:
    for path in (OPENAI, OLLAMA):
        r = httpx.post(scripted_server.url + path, json={"model": "scripted", "stream": False, "messages": user("script:busy")})
        assert r.status_code == 503
        assert r.headers["retry-after"] == "2"


@pytest.mark.parametrize("path", ["/v1/nothing", "/api/nothing"])
def test_unknown_route_is_404_in_dialect(scripted_server: RunningServer, path: str) -> None:
    r = httpx.get(scripted_server.url + path)
    assert r.status_code == 404
    body = r.json()
    assert isinstance(body["error"], dict) if path.startswith("/v1/") else isinstance(body["error"], str)


def test_wrong_method_is_405(scripted_server: RunningServer) -> None:
    r = httpx.get(scripted_server.url + OLLAMA)
    assert r.status_code == 405
    assert "not allowed" in r.json()["error"]
    # It says what is allowed, in the body and in Allow (RFC 9110), as a client error.
    assert r.json()["error"] == f"GET is not allowed on {OLLAMA}; use POST" and r.headers["allow"] == "POST"
    claude = httpx.get(scripted_server.url + "/v1/messages")
    assert claude.status_code == 405 and claude.json()["error"]["type"] == "invalid_request_error"
    assert claude.json()["error"]["message"].endswith("; use POST")
    gpt = httpx.put(scripted_server.url + "/v1/responses/resp_1")
    assert gpt.json()["error"]["type"] == "invalid_request_error" and set(gpt.headers["allow"].split(", ")) == {"GET", "DELETE"}


def test_openai_client_raises_typed_errors(scripted_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="any", max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="nope", messages=user("hi"))
    assert "model 'nope' not found" in info.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="scripted", messages=user("x"), top_logprobs=30, logprobs=True)


def test_ollama_client_raises_response_error(scripted_server: RunningServer) -> None:
    client = ollama.Client(host=scripted_server.url)
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="nope", messages=user("hi"))
    assert info.value.status_code == 404
    assert "not found" in info.value.error


def test_error_after_stream_began_openai(scripted_server: RunningServer) -> None:
    with httpx.stream("POST", scripted_server.url + OPENAI, json={"model": "scripted", "stream": True, "messages": user("script:fail-midstream")}) as r:
        assert r.status_code == 200
        text = r.read().decode()
    events = [block for block in text.split("\n\n") if block]
    assert all(block.startswith("data: ") for block in events)
    error = json.loads(events[-2].removeprefix("data: "))
    assert error["error"]["message"] == "scripted failure after streaming began"
    assert events[-1] == "data: [DONE]"


def test_crash_after_stream_began_ollama(scripted_server: RunningServer) -> None:
    with httpx.stream("POST", scripted_server.url + OLLAMA, json={"model": "scripted", "messages": user("script:crash-midstream")}) as r:
        assert r.status_code == 200
        lines = [json.loads(line) for line in r.read().decode().splitlines()]
    assert lines[0]["message"]["content"] == "partial "
    assert "scripted crash" in lines[-1]["error"]
    assert set(lines[-1]) == {"error"}


def test_openai_client_sees_midstream_error(scripted_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="any", max_retries=0)
    stream = client.chat.completions.create(model="scripted", messages=user("script:fail-midstream"), stream=True)
    with pytest.raises(openai.APIError, match="scripted failure"):
        for _ in stream:
            pass


def test_ollama_client_sees_midstream_error(scripted_server: RunningServer) -> None:
    client = ollama.Client(host=scripted_server.url)
    with pytest.raises(ollama.ResponseError, match="scripted failure"):
        for _ in client.chat(model="scripted", messages=user("script:fail-midstream"), stream=True):
            pass
