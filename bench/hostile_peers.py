"""The hostile peers of ``bench/hostile.py``'s upstream and image kinds, in a process of
their own (so that sending hundreds of MiB costs the measuring process nothing): a
replay upstream on 127.0.0.1 with a 29 MiB stream line and a 600 MiB whole reply, and
an image host with a zstd frame of 1 GiB of zeros. Prints ``{"upstream": URL,
"images": URL}`` on one line once both listen, then serves until killed.

    python bench/hostile_peers.py
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.image_host import bomb, image_host  # noqa: E402
from tests.support.replay import Reply, replay_server  # noqa: E402

MiB = 1024 * 1024

SCRIPT: dict[str, Reply | list[Reply]] = {
    # issue 9 row 11: one stream line of 29 MiB without a newline, then its end
    "hostile-line": Reply(body=b"data: " + b"x" * (MiB - 6), repeat=29, tail=b"\n\n",
                          headers={"Content-Type": "text/event-stream"}),
    # row 11: a 600 MiB whole reply to a request that did not stream
    "hostile-whole": Reply(body=b"x" * MiB, repeat=600, headers={"Content-Type": "application/json"}),
    # the model the image kind names: an ordinary answer, once the images are fetched
    "hostile-vision": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
}


def main() -> None:
    bomb("zstd")  # made before anyone asks
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with replay_server(SCRIPT) as upstream, image_host() as images:
        print(json.dumps({"upstream": upstream.url, "images": images.url}), flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
