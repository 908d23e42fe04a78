"""The hostile peers of the upstream and image kinds of ``bench/hostile.py`` (issue 9,
rows 6 and 11), and those kinds: a replay upstream on 127.0.0.1 with a 29 MiB stream
line and a 600 MiB whole reply, and an image host with a zstd frame of 1 GiB of zeros.

The peers run in a process of their own, so that sending hundreds of MiB costs the
measuring process nothing: ``python bench/hostile_peers.py`` prints
``{"upstream": URL, "images": URL}`` on one line once both listen, then serves until
killed; :func:`start` does that from a benchmark. :data:`KINDS` are (name, row,
request, config) rows for ``hostile.py``'s table, ``{upstream}`` in a config standing
for the upstream's URL (``config.format(**urls)``); the requests read :data:`URLS`,
which :func:`start` fills.

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


def _upstream_entry(name: str) -> str:
    return f"  - name: {name}\n    backend: openai\n    base_url: {{upstream}}/v1\n"


def _chat(model: str, *, stream: bool) -> tuple[str, dict[str, Any]]:
    return "/api/chat", {"model": model, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]}


def _image(model: str) -> tuple[str, dict[str, Any]]:
    del model  # the image goes to a model that takes images: an upstream entry
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": URLS["images"] + "/bomb-zstd"}}]  # fmt: skip
    return "/v1/chat/completions", {"model": "hostile-vision", "messages": [{"role": "user", "content": content}]}


KINDS: list[tuple[str, str, Request, str]] = [
    ("a 29 MiB upstream stream line", "11", lambda m: _chat("hostile-line", stream=True), _upstream_entry("hostile-line")),
    ("a 600 MiB upstream reply", "11", lambda m: _chat("hostile-whole", stream=False), _upstream_entry("hostile-whole")),
    ("a zstd image of 1 GiB of zeros", "6", _image, _upstream_entry("hostile-vision")
     + "server:\n  image_fetch: {{enabled: true, allowed_hosts: [127.0.0.1]}}\n"),  # fmt: skip
]


def start() -> subprocess.Popen[bytes]:
    """The peers' process, up, with :data:`URLS` filled; terminate it when done."""
    peers = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE)
    assert peers.stdout is not None
    URLS.update(json.loads(peers.stdout.readline()))
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
    }
    bomb("zstd")  # made before anyone asks
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with replay_server(script) as upstream, image_host() as images:
        print(json.dumps({"upstream": upstream.url, "images": images.url}), flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
