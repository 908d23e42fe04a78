"""The page in a real headless Chromium against a real server on the real model:
it loads cleanly, lists the model, streams a playground answer, stops a generation,
unloads the model, and with keys set does nothing until a key is entered."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from playwright.sync_api import Page, expect

from dragoman.backends.onnx import OnnxBackend
from dragoman.backends.registry import settings_type
from dragoman.config import Config, ModelRoute, load_config
from dragoman.proxy.models import build_backend
from tests.support.server import RunningServer, config_from_yaml, serve

MODEL = "smollm2:135m"
KEY = "browser-test-key-7e3a"
QUESTION = "What is the capital of France?"
SYSTEM = "You are a concise assistant."
SLOW = 60_000  # ms: the machine is shared; a first load builds nothing but may be slow


def default_config(model_home: Path) -> Config:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAGOMAN_HOME", str(model_home))
        return load_config(None, settings_type)


class Served(msgspec.Struct):
    server: RunningServer
    backend: OnnxBackend


@pytest.fixture(scope="module")
def served(model_home: Path) -> Iterator[Served]:
    """The built-in config on the real model; the test keeps its backend to read the
    backend's own counters (a cancellation is counted where it happens)."""
    built: list[Any] = []

    def factory(route: ModelRoute) -> Any:
        built.append(build_backend(route))
        return built[-1]

    with serve(default_config(model_home), backend_factory=factory) as server:
        yield Served(server=server, backend=built[0])


class Watched(msgspec.Struct):
    page: Page
    errors: list[str]
    requests: list[Any]


@pytest.fixture
def watched(chromium: Any) -> Iterator[Watched]:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    requests: list[Any] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("request", lambda r: requests.append(r))
    try:
        yield Watched(page=page, errors=errors, requests=requests)
    finally:
        context.close()


def row(page: Page, model: str = MODEL) -> Any:
    return page.locator(f'#models-table tr[data-model="{model}"]')


def open_page(w: Watched, served: Served) -> Page:
    w.page.goto(served.server.url + "/ui")
    expect(row(w.page)).to_be_visible(timeout=SLOW)
    return w.page


def chat(page: Page, message: str, *, dialect: str, max_tokens: int, temperature: float = 0, system: str = "") -> None:
    page.select_option("#chat-dialect", dialect)
    page.fill("#chat-system", system)
    page.fill("#chat-temperature", str(temperature))
    page.fill("#chat-max-tokens", str(max_tokens))
    page.fill("#chat-input", message)
    page.click("#chat-send")


def test_the_page_lists_the_model_with_no_console_errors(watched: Watched, served: Served) -> None:
    page = open_page(watched, served)
    cells = row(page).locator("td")
    assert cells.nth(0).inner_text() == MODEL
    assert cells.nth(1).inner_text() == "smollm2"  # the built-in alias
    assert cells.nth(2).inner_text() == "onnx"
    assert "completion" in cells.nth(4).inner_text()
    assert cells.nth(5).inner_text() == "2048"
    expect(page.locator("#readiness")).to_have_text("ready")
    expect(page.locator("#checks-table")).to_contain_text(f"model:{MODEL}")
    expect(page.locator("#config-check")).to_contain_text(re.compile(rf"{re.escape(MODEL)}\s+onnx\s+exact"))
    expect(page.locator("#chat-model")).to_have_value(MODEL)
    # the built-in embedding model is listed, but not offered to chat with
    expect(row(page, "all-minilm").locator("td").nth(4)).to_have_text("embedding")
    assert page.locator("#chat-model option").all_inner_texts() == [MODEL]
    expect(page.locator("#stat-total")).to_have_text(re.compile(r"^\d+$"))
    page.wait_for_timeout(2500)  # one live refresh of /metrics and /api/ps
    assert watched.errors == []


def test_a_playground_message_streams_the_answer_in_both_dialects(watched: Watched, served: Served, tmp_path: Path) -> None:
    page = open_page(watched, served)
    # The same greedy request, asked whole: the page must put the streamed pieces together to it.
    whole = httpx.post(served.server.url + "/api/chat", timeout=60, json={
        "model": MODEL, "stream": False, "options": {"temperature": 0, "num_predict": 40},
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
    }).json()["message"]["content"]
    assert "Paris" in whole
    for dialect, other in (("ollama", "openai"), ("openai", "ollama")):  # openai last: its page is the screenshot
        page.click("#chat-clear")
        chat(page, QUESTION, dialect=dialect, max_tokens=40, system=SYSTEM)
        expect(page.locator("#chat-status")).to_have_text(re.compile(r"^done \((stop|length)\)"), timeout=SLOW)
        assert page.locator("#transcript .msg.assistant .answer").last.inner_text() == whole
        # The last turn in both dialects: one as sent, the other as the adapters write it.
        expect(page.locator(f"#turn-{dialect}-title")).to_contain_text("as sent and received")
        expect(page.locator(f"#turn-{other}-title")).to_contain_text("translated by the gateway")
        expect(page.locator("#turn-canonical")).to_contain_text('"num_predict": 40')
        frame = "data: {" if other == "openai" else '{"model":"smollm2:135m"'
        expect(page.locator(f"#turn-{other}-response")).to_contain_text(frame)
        expect(page.locator("#turn-reply")).to_contain_text(whole.split()[0])
    expect(page.locator("#stat-tps")).not_to_have_text("–", timeout=10_000)
    expect(page.locator("#stat-ttft")).to_have_text(re.compile(r"\d"))
    page.wait_for_timeout(2500)  # a chart point or two after the turn
    screenshot(page, tmp_path)
    assert watched.errors == []


def screenshot(page: Page, tmp_path: Path) -> None:
    """Kept from every run; DRAGOMAN_UI_SCREENSHOT=docs/ui.png writes the one docs/operations.md shows."""
    target = os.environ.get("DRAGOMAN_UI_SCREENSHOT")
    page.screenshot(path=str(tmp_path / "ui.png"), full_page=True)
    if target:
        page.screenshot(path=target, full_page=True)


def test_stop_cancels_the_generation(watched: Watched, served: Served) -> None:
    page = open_page(watched, served)
    counters = served.backend.counters
    cancelled, finished = counters["cancelled"], counters["finished"]
    # greedy, this prompt runs to the token limit (1500 tokens: half a minute here)
    chat(page, "Write a long story about a sailor and the sea.", dialect="openai", max_tokens=1500)
    answer = page.locator("#transcript .msg.assistant .answer").last
    expect(page.locator("#chat-status")).to_have_text(re.compile("^streaming"), timeout=SLOW)
    expect(answer).to_have_text(re.compile(r"[\s\S]{30,}"), timeout=SLOW)  # it is arriving bit by bit
    # the ONNX backend's own admission, through /metrics: one chat running
    expect(page.locator("#stat-active")).to_have_text("1", timeout=10_000)
    page.click("#chat-stop")
    expect(page.locator("#chat-status")).to_have_text(re.compile("^stopped after"), timeout=10_000)
    deadline = time.monotonic() + 15
    while counters["cancelled"] == cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counters["cancelled"] == cancelled + 1  # the backend stopped generating
    assert counters["finished"] == finished  # and did not run on to the end
    text = answer.inner_text()
    page.wait_for_timeout(1000)
    assert answer.inner_text() == text  # nothing arrives after Stop
    expect(page.locator("#turn-reply")).to_contain_text("ended before")  # the turn view says it was cut
    expect(page.locator("#chat-send")).to_be_enabled()


def test_unload_and_load_change_the_state_on_the_page(watched: Watched, served: Served) -> None:
    page = open_page(watched, served)
    state = row(page).locator("td.state")
    row(page).locator("button.load").click()
    expect(state).to_have_text("loaded", timeout=SLOW)
    expect(row(page).locator("td.expires")).to_have_text(re.compile(r"^in \d"))
    row(page).locator("button.unload").click()
    expect(state).to_have_text("not loaded", timeout=SLOW)
    assert served.backend.loaded() == []
    row(page).locator("button.load").click()
    expect(state).to_have_text("loaded", timeout=SLOW)
    assert [m.name for m in served.backend.loaded()] == [MODEL]
    assert watched.errors == []


def test_the_engine_column_says_what_runs_the_model_and_why(watched: Watched, served: Served, model_dir: Path) -> None:
    """The default entry: what /api/ps says (batch or generator, as this CPU allows);
    an entry forced onto the Generator: marked, with the reason beside it."""
    page = open_page(watched, served)
    row(page).locator("button.load").click()
    expect(row(page).locator("td.state")).to_have_text("loaded", timeout=SLOW)
    details = next(m for m in httpx.get(served.server.url + "/api/ps").json()["models"] if m["name"] == MODEL)["details"]
    cell = row(page).locator("td.engine")
    if details["engine_reason"]:
        expect(cell.locator(".pill.warn")).to_have_text(details["engine"])
        expect(cell.locator("small.reason")).to_have_text(details["engine_reason"])
    else:
        expect(cell).to_have_text(details["engine"])
    forced = config_from_yaml(
        f"models:\n  - {{name: forced, backend: onnx, path: '{model_dir}', provider: cpu, context_length: 1024, engine: generator}}\n"
    )
    with serve(forced) as server:
        page.goto(server.url + "/ui")
        row(page, "forced").locator("button.load").click()
        cell = row(page, "forced").locator("td.engine")
        expect(cell.locator(".pill.warn")).to_have_text("generator", timeout=SLOW)
        expect(cell.locator("small.reason")).to_have_text("engine: generator in the config")
    assert watched.errors == []


@pytest.fixture(scope="module")
def keyed(model_home: Path) -> Iterator[RunningServer]:
    config = msgspec.structs.replace(default_config(model_home), api_keys=[KEY])
    with serve(config) as server:
        yield server


def test_with_keys_the_page_does_nothing_until_a_key_is_entered(watched: Watched, keyed: RunningServer) -> None:
    page = watched.page
    page.goto(keyed.url + "/ui")
    expect(page.locator("#key-prompt")).to_be_visible()
    expect(page.locator("#app")).to_be_hidden()
    page.wait_for_timeout(1500)
    paths = {re.sub(r"^https?://[^/]+", "", r.url) for r in watched.requests}
    assert paths and all(p == "/ui" or p.startswith("/ui/static/") for p in paths), paths  # no data asked for

    page.fill("#key-input", "not-the-key")
    page.click("#key-form button")
    expect(page.locator("#key-message")).to_contain_text("refused")
    expect(page.locator("#app")).to_be_hidden()

    del watched.requests[:]
    page.fill("#key-input", KEY)
    page.click("#key-form button")
    expect(row(page)).to_be_visible(timeout=SLOW)
    expect(page.locator("#key-prompt")).to_be_hidden()
    assert page.locator("#key-input").input_value() == ""
    assert KEY not in page.content()  # the key is never rendered
    api = [r for r in watched.requests if "/ui/static/" not in r.url]
    assert api and all(r.headers.get("authorization") == f"Bearer {KEY}" for r in api)

    page.click("#forget-key")
    expect(page.locator("#key-prompt")).to_be_visible()
    expect(page.locator("#app")).to_be_hidden()


def test_metrics_carry_the_onnx_backends_queue(served: Served) -> None:
    """What the page's Running and Queue depth read: the ONNX backend's own admission."""
    text = httpx.get(served.server.url + "/metrics", timeout=10).text
    assert f'dragoman_queue_depth{{model="{MODEL}"}} 0.0' in text
    assert re.search(rf'dragoman_active_requests{{model="{re.escape(MODEL)}"}} \d', text)
