"""Two dragoman servers sharing stored Responses through one real PostgreSQL
(``server.responses: {kind: postgres}``), with the official ``openai`` client: what one
stores, the other retrieves, lists and continues, each key still seeing only its own; the
database down is a 503 the client is told to retry, and both recover when it is back."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from tests.support.postgres import Postgres, postgres_server
from tests.support.server import RunningServer, config_from_yaml, serve

CONFIG = """\
server:
  api_keys: "key-a, key-b"
  responses: {{kind: postgres, url: "{url}"}}
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def replicas(postgres: Postgres) -> Iterator[tuple[RunningServer, RunningServer]]:
    config = config_from_yaml(CONFIG.format(url=postgres.database("replicas")))
    with serve(config) as first, serve(config) as second:
        yield first, second


def client(server: RunningServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_what_one_replica_stores_the_other_retrieves_and_continues(replicas: tuple[RunningServer, RunningServer]) -> None:
    one, other = replicas
    first = client(one, "key-a").responses.create(model="scripted", input="my secret is 42")
    alice = client(other, "key-a")
    assert alice.responses.retrieve(first.id).id == first.id
    second = alice.responses.create(model="scripted", input="what was it?", previous_response_id=first.id)
    items = alice.responses.input_items.list(second.id, order="asc").data
    assert [i.content[0].text for i in items if i.type == "message"][0] == "my secret is 42"  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):
        client(other, "key-b").responses.retrieve(first.id)
    client(one, "key-a").responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(second.id)


def test_the_database_down_is_a_503_and_both_recover(replicas: tuple[RunningServer, RunningServer], postgres: Postgres) -> None:
    one, other = replicas
    stored = client(one, "key-a").responses.create(model="scripted", input="before")
    postgres.stop()
    try:
        with pytest.raises(openai.InternalServerError) as down:
            client(other, "key-a").responses.retrieve(stored.id)
        assert down.value.status_code == 503 and "retry" in down.value.message
        assert down.value.response.headers.get("retry-after")
    finally:
        postgres.start()
    deadline = time.monotonic() + 20
    for server in (one, other):
        while True:
            try:
                assert client(server, "key-a").responses.retrieve(stored.id).id == stored.id
                break
            except openai.InternalServerError:
                assert time.monotonic() < deadline, "a replica did not reconnect"
                time.sleep(0.3)
