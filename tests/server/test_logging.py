"""One access-log line per request, with the fields operators need."""

from __future__ import annotations

import json
import time

import httpx
import pytest
import structlog.testing

from tests.support.server import RunningServer


def _access_lines(logs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [entry for entry in logs if entry.get("event") == "request" and "dialect" in entry]


def test_one_line_per_request_with_tokens(scripted_server: RunningServer) -> None:
    with structlog.testing.capture_logs() as logs:
        httpx.post(scripted_server.url + "/v1/chat/completions", json={"model": "nickname", "messages": [{"role": "user", "content": "hi"}]})
        with httpx.stream("POST", scripted_server.url + "/api/chat", json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}) as r:
            r.read()
        httpx.post(scripted_server.url + "/api/chat", json={"model": "nope", "messages": []})
        time.sleep(0.1)  # the streamed request logs when its last frame is sent
    first, streamed, missing = _access_lines(logs)
    assert first["dialect"] == "openai" and first["model"] == "nickname" and first["backend"] == "tests.support.scripted:ScriptedBackend"
    assert (first["status"], first["prompt_tokens"], first["generated_tokens"]) == (200, 7, 3)
    assert streamed["dialect"] == "ollama" and streamed["generated_tokens"] == 3
    assert missing["status"] == 404 and "not found" in str(missing["error"])
    assert all(isinstance(line["duration_ms"], float) and line["request_id"] for line in (first, streamed, missing))


def test_json_renderer_when_configured(capsys: pytest.CaptureFixture[str]) -> None:
    from dragoman.proxy.logging import configure_logging

    try:
        configure_logging("json", "info")
        structlog.get_logger("t").info("request", model="m", status=200)
        structlog.get_logger("t").debug("hidden below the level")
        line = capsys.readouterr().err.strip()
        entry = json.loads(line)
        assert (entry["event"], entry["model"], entry["status"], entry["level"]) == ("request", "m", 200, "info")
    finally:
        structlog.reset_defaults()


@pytest.mark.parametrize(
    ("name", "event", "expected"),
    [
        ("plain fields", {"event": "request", "status": 200, "duration_ms": 1.5}, {"event": "request", "status": 200, "duration_ms": 1.5}),
        ("text beyond ASCII", {"event": "request", "model": "modèle"}, {"event": "request", "model": "modèle"}),
        ("an object msgspec cannot write becomes its repr", {"event": "x", "error": ValueError("boom")}, {"event": "x", "error": "ValueError('boom')"}),
    ],
)
def test_json_lines_are_json(name: str, event: dict[str, object], expected: dict[str, object]) -> None:
    from dragoman.proxy.logging import _dumps

    line = _dumps(event)
    assert "\n" not in line and json.loads(line) == expected
