"""Stored responses over real HTTP with the official ``openai`` client: they belong to
the API key that made them (another key can neither read, list, chain from nor delete
one; it is told "not found", as for an id that never existed), and no one request can
fill the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.server import RunningServer, config_from_yaml, serve

CONFIG = """\
server:
  api_keys: "key-a, key-b"
  responses: {{path: {path}}}
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
"""


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    path = tmp_path_factory.mktemp("owners") / "responses.sqlite3"
    with serve(config_from_yaml(CONFIG.format(path=path))) as server:
        yield server


def client(server: RunningServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_another_key_cannot_see_or_use_a_stored_response(guarded: RunningServer) -> None:
    alice, bob = client(guarded, "key-a"), client(guarded, "key-b")
    first = alice.responses.create(model="scripted", input="my secret is 42")

    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.input_items.list(first.id)
    with pytest.raises(openai.NotFoundError) as chained:
        bob.responses.create(model="scripted", input="what was it?", previous_response_id=first.id)
    assert chained.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(first.id)

    # Still there, and still the owner's.
    assert alice.responses.retrieve(first.id).id == first.id
    second = alice.responses.create(model="scripted", input="what was it?", previous_response_id=first.id)
    assert [i.content[0].text for i in alice.responses.input_items.list(second.id, order="asc").data if i.type == "message"][0] == "my secret is 42"  # type: ignore[union-attr]
    alice.responses.delete(first.id)


def test_a_store_file_from_before_owners_opens(tmp_path: Path) -> None:
    """Files written before rows had owners gain the column; their rows are the
    no-key server's ('')."""
    path = tmp_path / "responses.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, created_at REAL NOT NULL, size INTEGER NOT NULL, response BLOB NOT NULL, input BLOB NOT NULL)")
    with serve(config_from_yaml(f"server:\n  responses: {{path: {path}}}\nmodels:\n  - name: scripted\n    backend: tests.support.scripted:ScriptedBackend\n")) as server:
        open_client = client(server, "anything")
        made = open_client.responses.create(model="scripted", input="hello")
        assert client(server, "another").responses.retrieve(made.id).id == made.id  # no keys: one client


def test_one_request_cannot_fill_the_store(scripted_server: RunningServer) -> None:
    """What is echoed back without reaching the model (built-in tools, metadata,
    identifiers) was stored whole: a request of a few tokens stored ~27 MB, so ten of
    them pushed every other client's stored responses out of max_bytes."""
    client = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="x", max_retries=0)
    kept = client.responses.create(model="scripted", input="hello")
    junk: dict[str, Any] = {"type": "web_search", "filters": {"allowed_domains": ["x" * 1000] * 10_000}}
    for extra in ({"tools": [junk]}, {"metadata": {f"k{i}": "v" * 512 for i in range(1000)}}, {"prompt_cache_key": "k" * 5_000_000}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="scripted", input="hello", **extra)
        assert refused.value.body["param"] in ("tools", "metadata", "prompt_cache_key")  # type: ignore[index]
    assert client.responses.retrieve(kept.id).id == kept.id


SMALL_STORE = """\
server:
  api_keys: "key-a, key-b"
  responses: {{path: {path}, max_bytes: 1048576}}
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
"""


@pytest.fixture
def small_store(tmp_path: Path) -> Iterator[RunningServer]:
    with serve(config_from_yaml(SMALL_STORE.format(path=tmp_path / "responses.sqlite3"))) as server:
        yield server


def test_one_key_filling_the_store_pushes_out_its_own_responses(small_store: RunningServer) -> None:
    """Key B storing 8 × 200 KB in a 1 MiB store made key A's only response a 404: the
    oldest rows went whoever owned them. Now the key holding the most loses its oldest."""
    alice, bob = client(small_store, "key-a"), client(small_store, "key-b")
    kept = alice.responses.create(model="scripted", input="remember me")
    bobs = [bob.responses.create(model="scripted", input=f"{i} " + "x" * 200_000).id for i in range(8)]
    assert alice.responses.retrieve(kept.id).id == kept.id
    assert bob.responses.retrieve(bobs[-1]).id == bobs[-1]  # the newest of B's are kept...
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(bobs[0])  # ...and its oldest made room


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_too_big_to_store_says_store_false(small_store: RunningServer, stream: bool) -> None:
    """It said store: true and then 404'd."""
    alice = client(small_store, "key-a")
    huge = "y" * 1_100_000  # over max_bytes alone
    if stream:
        events = list(alice.responses.create(model="scripted", input=huge, stream=True))
        final = events[-1].response  # type: ignore[union-attr]
        assert events[0].response.store is True  # type: ignore[union-attr]  # known only at the end
    else:
        final = alice.responses.create(model="scripted", input=huge)
    assert final.status == "completed" and final.output_text
    assert final.store is False
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(final.id)
    small = alice.responses.create(model="scripted", input="small", stream=stream)
    small_final = list(small)[-1].response if stream else small  # type: ignore[union-attr, arg-type]
    assert small_final.store is True and alice.responses.retrieve(small_final.id).id == small_final.id
