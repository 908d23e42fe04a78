"""``background: true`` over real HTTP with the official ``openai`` client: the queued
response, polling until it ends, cancelling a running one (the backend's request ends
too), a stream that drops and is resumed from ``starting_after``, owner isolation and
errors naming the field. The real model: test_background_real_model.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve

CONFIG = """\
server:
  api_keys: "key-a, key-b"
  responses: {{path: {path}}}
models:
  - {{name: scripted, backend: 'tests.support.scripted:ScriptedBackend', delay: 0.02}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    path = tmp_path_factory.mktemp("background") / "responses.sqlite3"
    with serve(config_from_yaml(CONFIG.format(path=path))) as running:
        yield running


def client(server: RunningServer, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def _poll(alice: openai.OpenAI, response_id: str) -> openai.types.responses.Response:
    deadline = time.monotonic() + 30
    while (polled := alice.responses.retrieve(response_id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return polled


def test_background_create_and_poll(server: RunningServer) -> None:
    alice = client(server)
    queued = alice.responses.create(model="scripted", input="script:slow", background=True)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    assert alice.responses.retrieve(queued.id).status in ("queued", "in_progress")
    done = _poll(alice, queued.id)
    assert done.status == "completed" and done.output_text.startswith("tick0 tick1") and done.background is True
    assert done.usage is not None and done.usage.output_tokens == 3
    assert [i.type for i in alice.responses.input_items.list(queued.id).data] == ["message"]


def test_cancel_stops_the_model(server: RunningServer) -> None:
    alice = client(server)
    queued = alice.responses.create(model="scripted", input="script:slow", background=True)
    deadline = time.monotonic() + 10
    while alice.responses.retrieve(queued.id).status == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    cancelled = alice.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert alice.responses.retrieve(queued.id).status == "cancelled"
    assert any(key.startswith("slow#") for key in ScriptedBackend.cancelled)  # the backend's request ended
    assert alice.responses.cancel(queued.id).status == "cancelled"  # again: the same answer


def test_a_dropped_stream_resumes_where_it_was(server: RunningServer) -> None:
    alice = client(server)
    stream = alice.responses.create(model="scripted", input="script:slow", background=True, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if len(seen) == 8:
            break  # the connection drops
    stream.close()
    last = seen[-1].sequence_number
    resumed = list(alice.responses.retrieve(seen[0].response.id, stream=True, starting_after=last))
    assert resumed[0].sequence_number == last + 1
    numbers = [e.sequence_number for e in [*seen, *resumed]]
    assert numbers == list(range(len(numbers)))  # nothing lost, nothing twice
    assert resumed[-1].type == "response.completed"
    text = "".join(e.delta for e in [*seen, *resumed] if e.type == "response.output_text.delta")
    assert text == resumed[-1].response.output_text
    again = list(alice.responses.retrieve(seen[0].response.id, stream=True, starting_after=-1))
    assert [e.sequence_number for e in again] == numbers  # after it ended, from the start too


def test_another_key_cannot_poll_cancel_or_resume(server: RunningServer) -> None:
    alice, bob = client(server), client(server, "key-b")
    queued = alice.responses.create(model="scripted", input="script:slow", background=True)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(queued.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.cancel(queued.id)
    with pytest.raises(openai.NotFoundError):
        list(bob.responses.retrieve(queued.id, stream=True, starting_after=0))
    assert _poll(alice, queued.id).status == "completed"


def test_errors_name_the_field(server: RunningServer, tmp_path: Path) -> None:
    alice = client(server)
    with pytest.raises(openai.BadRequestError) as unstored:
        alice.responses.create(model="scripted", input="hi", background=True, store=False)
    assert unstored.value.param == "background"
    done = alice.responses.create(model="scripted", input="hi")
    with pytest.raises(openai.BadRequestError) as foreground:
        alice.responses.cancel(done.id)
    assert "background" in foreground.value.message
    bad = httpx.get(f"{server.url}/v1/responses/{done.id}", params={"stream": "true"}, headers={"Authorization": "Bearer key-a"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream"
    failing = alice.responses.create(model="scripted", input="script:fail-before", background=True)
    failed = _poll(alice, failing.id)
    assert failed.status == "failed" and failed.error is not None and "scripted backend failure" in failed.error.message
    no_store = "models:\n  - {name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}\nserver:\n  responses: {kind: none}\n"
    with serve(config_from_yaml(no_store)) as off:
        with pytest.raises(openai.BadRequestError) as store_off:
            client(off).responses.create(model="scripted", input="hi", background=True)
        assert store_off.value.param == "background" and "kind" in store_off.value.message
