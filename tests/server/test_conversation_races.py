"""Turns added to one conversation through two servers at once — two replicas on one
PostgreSQL, or two server processes on one SQLite file — all land, each once: a
conversation's read, change and write is one transaction of the shared store, not a lock
of one process. Over real HTTP with the official ``openai`` client."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.support.postgres import postgres_server
from tests.support.server import RunningServer, config_from_yaml, serve

CONFIG = """\
server:
  api_keys: "key-a"
  responses: {store}
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
"""
ADDS = 24  # items added concurrently, half through each server


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def replicas(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, RunningServer]]:
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("shared") / "responses.sqlite3"
        yield from _pair(f"{{path: {path}}}")
        return
    with postgres_server() as postgres:
        yield from _pair(f'{{kind: postgres, url: "{postgres.database("races")}"}}')


def _pair(store: str) -> Iterator[tuple[RunningServer, RunningServer]]:
    config = config_from_yaml(CONFIG.format(store=store))
    with serve(config) as first, serve(config) as second:
        yield first, second


def client(server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="key-a", max_retries=0)


def _message(text: str) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": text}


def _texts(server: RunningServer, conversation_id: str) -> list[str]:
    items = client(server).conversations.items.list(conversation_id, order="asc", limit=100).data
    return [item.content[0].text for item in items]  # type: ignore[union-attr]


def test_items_added_through_two_servers_at_once_all_land(replicas: tuple[RunningServer, RunningServer]) -> None:
    one, other = replicas
    made = client(one).conversations.create(items=[_message("first")])

    def add(n: int) -> None:
        client(replicas[n % 2]).conversations.items.create(made.id, items=[_message(f"add {n}")])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(add, range(ADDS)))
    texts = _texts(other, made.id)
    assert texts[0] == "first"
    assert sorted(texts[1:]) == sorted(f"add {n}" for n in range(ADDS)), f"lost or doubled: {texts}"


def test_a_delete_and_adds_at_once_each_take_effect(replicas: tuple[RunningServer, RunningServer]) -> None:
    one, other = replicas
    made = client(one).conversations.create(items=[_message("doomed"), _message("kept")])
    doomed = client(one).conversations.items.list(made.id, order="asc").data[0].id

    def act(n: int) -> None:
        if n == ADDS // 2:
            client(other).conversations.items.delete(doomed, conversation_id=made.id)
        else:
            client(replicas[n % 2]).conversations.items.create(made.id, items=[_message(f"add {n}")])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(act, range(ADDS)))
    texts = _texts(one, made.id)
    assert "doomed" not in texts and texts[0] == "kept"
    assert sorted(texts[1:]) == sorted(f"add {n}" for n in range(ADDS) if n != ADDS // 2), f"lost or doubled: {texts}"


def test_metadata_set_through_one_server_survives_adds_through_the_other(replicas: tuple[RunningServer, RunningServer]) -> None:
    one, other = replicas
    made = client(one).conversations.create(items=[], metadata={"topic": "before"})

    def act(n: int) -> None:
        if n == ADDS // 2:
            client(one).conversations.update(made.id, metadata={"topic": "after"})
        else:
            client(other).conversations.items.create(made.id, items=[_message(f"add {n}")])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(act, range(ADDS)))
    assert client(other).conversations.retrieve(made.id).metadata == {"topic": "after"}
    assert len(_texts(one, made.id)) == ADDS - 1
