"""A background response polled, cancelled and continued through another server process
than the one running it — ``server.workers: 2`` on one machine, or replicas on one
PostgreSQL, where each request lands on either: the run's state is in the shared store
(queued, in progress, then its end), and a cancel through any process stops it. Two
servers on one SQLite file, over real HTTP with the official ``openai`` client."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.server.test_background_responses import CONFIG, client
from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve

@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, RunningServer]]:
    config = config_from_yaml(CONFIG.format(path=tmp_path_factory.mktemp("shared") / "responses.sqlite3"))
    with serve(config) as running, serve(config) as other:
        yield running, other


def _started(server: RunningServer) -> str:
    queued = client(server).responses.create(model="scripted", input="script:slow", background=True)
    assert queued.status == "queued"
    return queued.id


def test_the_other_process_answers_polls_until_the_end(pair: tuple[RunningServer, RunningServer]) -> None:
    running, other = pair
    response_id = _started(running)
    seen = []
    deadline = time.monotonic() + 30
    while (polled := client(other).responses.retrieve(response_id)).status in ("queued", "in_progress"):
        seen.append(polled.status)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert seen and set(seen) <= {"queued", "in_progress"}
    assert polled.status == "completed" and polled.output_text.startswith("tick0 tick1")
    assert polled.model_dump() == client(running).responses.retrieve(response_id).model_dump()
    with pytest.raises(openai.NotFoundError):
        client(other, "key-b").responses.retrieve(response_id)  # still only its key's


def test_a_cancel_through_the_other_process_stops_the_run(pair: tuple[RunningServer, RunningServer]) -> None:
    running, other = pair
    response_id = _started(running)
    deadline = time.monotonic() + 10
    while client(other).responses.retrieve(response_id).status == "queued":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with pytest.raises(openai.NotFoundError):
        client(other, "key-b").responses.cancel(response_id)
    assert client(other).responses.cancel(response_id).status == "cancelled"
    deadline = time.monotonic() + 10
    while (polled := client(running).responses.retrieve(response_id)).status != "cancelled":
        assert time.monotonic() < deadline, f"the running process did not stop: {polled.status}"
        time.sleep(0.05)
    stopped = time.monotonic() + 5
    while not any(key.startswith("slow#") for key in ScriptedBackend.cancelled):
        assert time.monotonic() < stopped, "the backend's request did not end"
        time.sleep(0.05)
    assert client(other).responses.retrieve(response_id).status == "cancelled"
    assert len(client(other).responses.retrieve(response_id).output_text) < len("tick0 " * 200)


def test_streaming_again_through_the_other_process_says_where(pair: tuple[RunningServer, RunningServer]) -> None:
    running, other = pair
    response_id = _started(running)
    reply = httpx.get(f"{other.url}/v1/responses/{response_id}", params={"stream": "true"},
                      headers={"Authorization": "Bearer key-a"})  # fmt: skip
    assert reply.status_code == 409, reply.text
    assert "another server process" in reply.json()["error"]["message"]
    client(running).responses.cancel(response_id)


def test_a_running_response_cannot_be_continued_yet(pair: tuple[RunningServer, RunningServer]) -> None:
    running, other = pair
    response_id = _started(running)
    with pytest.raises(openai.BadRequestError) as refused:
        client(other).responses.create(model="scripted", input="and then?", previous_response_id=response_id)
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert "still" in refused.value.message
    client(running).responses.cancel(response_id)
