"""The hostile peers of the upstream and image kinds of ``bench/hostile.py`` (issue 9,
rows 6, 8–11, 13, 14), and those kinds: a replay upstream on 127.0.0.1 with a 29 MiB
stream line, a 600 MiB whole reply, a 429 with ``Retry-After: inf``, a status line of
600, an Ollama error line claiming status 200, tool-call arguments nested 2,000 deep and
an ordinary answer behind credentials in the URL; and an image host with a zstd frame
of 1 GiB of zeros.

The peers run in a process of their own, so that sending hundreds of MiB costs the
measuring process nothing: ``python bench/hostile_peers.py`` prints
``{"upstream": URL, "images": URL}`` on one line once both listen, then serves until
killed; :func:`start` does that from a benchmark. :data:`KINDS` are (name, row,
request, config, expected) rows for ``hostile.py``'s table, ``{upstream}`` in a config
standing for the upstream's URL and ``{upstream_creds}`` for it with ``user:hunter2@``
(``config.format(**URLS)``); the requests read :data:`URLS`, which :func:`start` fills.
``expected`` is the answer a client must get: (status, words its headers and body must
hold; a word after ``!`` must not be there).

Measured with them (before = d8b578e, the main the issue was filed against): the 29 MiB
line stalled the loop past the 40 s window (p99 gap of four ONNX streams 11× quiet),
now a 502 in 0.2 s; the 600 MiB reply took 3.6–4.5 s (2.5×), now a 502 in 0.4 s.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024

URLS: dict[str, str] = {}  # "upstream", "images": filled by start()

Request = Callable[[str], tuple[str, dict[str, Any]]]  # the streams' model name -> (path, body)


def _upstream_entry(name: str, backend: str = "openai", url: str = "{upstream}/v1") -> str:
    return f"  - name: {name}\n    backend: {backend}\n    base_url: {url}\n"


def _chat(model: str, *, stream: bool) -> tuple[str, dict[str, Any]]:
    return "/api/chat", {"model": model, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]}


def _image(model: str, count: int = 1) -> tuple[str, dict[str, Any]]:
    del model  # the image goes to a model that takes images: an upstream entry
    content = [{"type": "text", "text": "What is this?"}] + [
        {"type": "image_url", "image_url": {"url": URLS["images"] + f"/bomb-zstd?{i}"}} for i in range(count)]  # fmt: skip
    return "/v1/chat/completions", {"model": "hostile-vision", "messages": [{"role": "user", "content": content}]}


IMAGE_FETCH = "server:\n  image_fetch: {{enabled: true, allowed_hosts: [127.0.0.1]}}\n"


Expected = tuple[int, tuple[str, ...]]

KINDS: list[tuple[str, str, Request, str, Expected]] = [
    ("a 29 MiB upstream stream line", "11", lambda m: _chat("hostile-line", stream=True), _upstream_entry("hostile-line"),
     (502, ("hostile-line", "max_line_bytes"))),
    ("a 600 MiB upstream reply", "11", lambda m: _chat("hostile-whole", stream=False), _upstream_entry("hostile-whole"),
     (502, ("larger than", "max_reply_bytes"))),
    ("a zstd image of 1 GiB of zeros", "6", _image, _upstream_entry("hostile-vision") + IMAGE_FETCH,
     (400, ("image", "max_bytes"))),
    ("200 image URLs", "8", lambda m: _image(m, 200), _upstream_entry("hostile-vision") + IMAGE_FETCH,
     (400, ("images", "max_images"))),
    ("upstream 429 with Retry-After: inf", "9", lambda m: _chat("hostile-retry", stream=False),
     _upstream_entry("hostile-retry"), (429, ("rate limit", "!retry-after"))),
    ("upstream status line 600", "10", lambda m: _chat("hostile-600", stream=False), _upstream_entry("hostile-600"),
     (502, ("upstream", "HTTP 600"))),
    ("Ollama error line with status 200", "10", lambda m: _chat("hostile-status", stream=False),
     _upstream_entry("hostile-status", "ollama", "{upstream}"), (502, ("x",))),
    ("credentials in base_url", "13", lambda m: _chat("hostile-creds", stream=False),
     _upstream_entry("hostile-creds", url="{upstream_creds}/v1"), (200, ("message", "!hunter2"))),
    ("upstream tool arguments 2000 deep", "14", lambda m: _chat("hostile-deep", stream=False),
     _upstream_entry("hostile-deep"), (502, ("nested too deeply",))),
]


def deep_arguments(levels: int) -> bytes:
    """An OpenAI stream whose one tool call's argument string nests ``levels`` deep."""
    arguments = '{"a":' + "[" * levels + "]" * levels + "}"
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [{
        "index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
        "finish_reason": None}]}  # fmt: skip
    done = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    return f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode()


def start() -> subprocess.Popen[bytes]:
    """The peers' process, up, with :data:`URLS` filled; terminate it when done."""
    peers = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE)
    assert peers.stdout is not None
    URLS.update(json.loads(peers.stdout.readline()))
    URLS["upstream_creds"] = URLS["upstream"].replace("http://", "http://user:hunter2@", 1)
    return peers


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.image_host import bomb, image_host
    from tests.support.replay import Reply, replay_server

    script: dict[str, Reply | list[Reply]] = {
        # one stream line of 29 MiB without a newline, then its end
        "hostile-line": Reply(body=b"data: " + b"x" * (MiB - 6), repeat=29, tail=b"\n\n",
                              headers={"Content-Type": "text/event-stream"}),  # fmt: skip
        # a 600 MiB whole reply to a request that did not stream
        "hostile-whole": Reply(body=b"x" * MiB, repeat=600, headers={"Content-Type": "application/json"}),
        # the model the image kind names: an ordinary answer, if its image is ever fetched
        "hostile-vision": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
        "hostile-retry": Reply("openai/error_429.json", status=429, headers={"Retry-After": "inf"}),
        "hostile-600": Reply("openai/error_429.json", status=600),
        "hostile-status": Reply(body=b'{"error":"x","status":200}\n', headers={"Content-Type": "application/x-ndjson"}),
        "hostile-creds": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
        "hostile-deep": Reply(body=deep_arguments(2000), headers={"Content-Type": "text/event-stream"}),
    }
    bomb("zstd")  # made before anyone asks
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with replay_server(script) as upstream, image_host() as images:
        print(json.dumps({"upstream": upstream.url, "images": images.url}), flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
