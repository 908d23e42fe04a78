"""What any chat reply over HTTP must look like, whatever was asked: never a 5xx, never
a traceback, a 4xx in the caller's error shape, a 200 whole and well framed."""

from __future__ import annotations

import httpx
from hypothesis import event

from tests.fuzz.frames import ndjson_lines, sse_payloads

REPLY_TEXT = "Hello, world"  # what the scripted backend says to anything but a script name


def check_openai_reply(response: httpx.Response, expected: str | None = REPLY_TEXT) -> None:
    status, text = response.status_code, response.text
    event(f"status {status}")  # shown by --hypothesis-show-statistics: is the 200 path reached?
    assert status < 500, text
    assert "Traceback" not in text and 'File "' not in text
    if status >= 400:
        body = response.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        return
    assert status == 200
    if response.headers["content-type"].startswith("text/event-stream"):
        payloads = sse_payloads(response.content)
        assert not any("error" in p for p in payloads), payloads
        content = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads if p["choices"])
    else:
        content = response.json()["choices"][0]["message"]["content"]
    assert expected is None or content == expected


def check_ollama_reply(response: httpx.Response, expected: str | None = REPLY_TEXT) -> None:
    status, text = response.status_code, response.text
    event(f"status {status}")
    assert status < 500, text
    assert "Traceback" not in text and 'File "' not in text
    if status >= 400:
        body = response.json()
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
        return
    assert status == 200
    lines = ndjson_lines(response.content) if "ndjson" in response.headers["content-type"] else [response.json()]
    assert not any("error" in line for line in lines), lines
    assert lines[-1]["done"] is True and all(not line["done"] for line in lines[:-1])
    if expected is not None and lines[-1]["done_reason"] not in ("load", "unload"):  # no messages: a load
        assert "".join(line["message"]["content"] for line in lines) == expected
