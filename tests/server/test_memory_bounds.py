"""What a hostile image host or upstream costs the gateway's memory, measured: dragoman
runs as its own process and its peak RSS (``VmHWM``) is read before and after
(issue 9, rows 6 and 11: 2.2 GB for one zstd image URL, 6.3 GB for three; 1.65 GB for
a 600 MiB upstream reply)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fuzz.processes import ServerProcess, dragoman_process
from tests.support.image_host import ImageHost, bomb, image_host
from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import free_port

MiB = 1024 * 1024
GROWTH_BOUND = 64 * MiB  # what one hostile request may add to the peak

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from /proc (Linux)")


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


@pytest.fixture(scope="module")
def images() -> Iterator[ImageHost]:
    for encoding in ("zstd", "gzip"):
        bomb(encoding)
    with image_host() as host:
        yield host


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayServer]:
    script: dict[str, Reply | list[Reply]] = {
        "ok": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
        "huge": Reply(body=b"x" * MiB, repeat=256, headers={"Content-Type": "application/json"}),
    }
    with replay_server(script) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(images: ImageHost, upstream: ReplayServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = f"""\
server:
  image_fetch: {{enabled: true, allowed_hosts: [127.0.0.1], max_bytes: {MiB}, timeout: 10}}
models:
  - {{name: scripted, backend: "tests.support.scripted:ScriptedBackend"}}
  - {{name: "*", backend: openai, base_url: "{upstream.url}/v1", max_reply_bytes: {8 * MiB}}}
"""
    with dragoman_process(config, free_port(), tmp_path_factory.mktemp("memory")) as server:
        yield server


def ask_images(gateway: ServerProcess, *urls: str) -> httpx.Response:
    content = [{"type": "text", "text": "what is this?"}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    body = {"model": "scripted", "messages": [{"role": "user", "content": content}]}
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=60)


def version_latency_while(gateway: ServerProcess, work: threading.Thread) -> float:
    """The slowest ``/api/version`` answer while ``work`` runs."""
    slowest = 0.0
    work.start()
    with httpx.Client(timeout=30) as client:
        while work.is_alive():
            started = time.perf_counter()
            client.get(gateway.url + "/api/version")
            slowest = max(slowest, time.perf_counter() - started)
            time.sleep(0.01)
    work.join()
    return slowest


def test_three_bomb_urls_cost_no_more_than_the_cap(gateway: ServerProcess, images: ImageHost) -> None:
    assert ask_images(gateway, images.url + "/dot.png", images.url + "/png-gzip").status_code == 200  # warm
    before = peak_rss(gateway.process.pid)
    answers: list[httpx.Response] = []
    urls = [images.url + f"/bomb-zstd?{i}" for i in range(3)] + [images.url + "/bomb-gzip"]
    slowest = version_latency_while(gateway, threading.Thread(target=lambda: answers.append(ask_images(gateway, *urls))))
    [r] = answers
    assert r.status_code == 400 and "larger than 1048576 bytes" in r.json()["error"]["message"]
    growth = peak_rss(gateway.process.pid) - before
    assert growth < GROWTH_BOUND, f"peak RSS grew {growth / MiB:.0f} MiB"
    assert slowest < 1.0, slowest  # the loop was blocked 28 s


def test_a_256_mib_upstream_reply_costs_no_more_than_max_reply_bytes(gateway: ServerProcess) -> None:
    body = {"model": "ok", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30).status_code == 200  # warm
    before = peak_rss(gateway.process.pid)
    answers: list[httpx.Response] = []
    huge = {"model": "huge", "messages": [{"role": "user", "content": "hi"}]}
    work = threading.Thread(target=lambda: answers.append(httpx.post(gateway.url + "/v1/chat/completions", json=huge, timeout=60)))
    slowest = version_latency_while(gateway, work)
    [r] = answers
    assert r.status_code == 502 and "max_reply_bytes" in r.json()["error"]["message"]
    growth = peak_rss(gateway.process.pid) - before
    assert growth < GROWTH_BOUND, f"peak RSS grew {growth / MiB:.0f} MiB"
    assert slowest < 1.0, slowest
