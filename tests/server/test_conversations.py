"""``/v1/conversations`` and ``conversation`` on ``responses.create``, over real HTTP with
the official ``openai`` client: the CRUD of conversations and their items, turns added to
the conversation they name, owner isolation and the store's bound as for stored
responses, and errors naming the field. The real model with openai-agents'
``OpenAIConversationsSession`` is in test_conversations_real_model.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.server import RunningServer, config_from_yaml, serve

CONFIG = """\
server:
  api_keys: "key-a, key-b"
  responses: {{path: {path}, max_bytes: {max_bytes}}}
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    path = tmp_path_factory.mktemp("conversations") / "responses.sqlite3"
    with serve(config_from_yaml(CONFIG.format(path=path, max_bytes=16_000_000))) as running:
        yield running


def client(server: RunningServer, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def _message(role: str, text: str) -> dict[str, str]:
    return {"type": "message", "role": role, "content": text}


def test_conversation_and_items_crud(server: RunningServer) -> None:
    alice = client(server)
    made = alice.conversations.create(items=[_message("user", "hello"), _message("assistant", "hi there")], metadata={"topic": "demo"})
    assert made.object == "conversation" and made.id.startswith("conv_") and made.metadata == {"topic": "demo"}
    assert alice.conversations.retrieve(made.id).created_at == made.created_at
    assert alice.conversations.update(made.id, metadata={"topic": "changed"}).metadata == {"topic": "changed"}

    added = alice.conversations.items.create(made.id, items=[_message("user", "third")])
    assert [item.type for item in added.data] == ["message"]
    listed = alice.conversations.items.list(made.id, order="asc")
    texts = [item.content[0].text for item in listed.data]
    assert texts == ["hello", "hi there", "third"]
    assert [item.content[0].type for item in listed.data] == ["input_text", "output_text", "input_text"]

    page = alice.conversations.items.list(made.id, limit=2)  # desc by default
    assert [i.id for i in page.data] == [listed.data[2].id, listed.data[1].id] and page.has_more
    everything = [item.id for item in alice.conversations.items.list(made.id, limit=1, order="asc")]  # the SDK pages by `after`
    assert everything == [item.id for item in listed.data]

    one = alice.conversations.items.retrieve(listed.data[1].id, conversation_id=made.id)
    assert one.id == listed.data[1].id
    after_delete = alice.conversations.items.delete(listed.data[1].id, conversation_id=made.id)
    assert after_delete.id == made.id
    assert [i.id for i in alice.conversations.items.list(made.id, order="asc").data] == [listed.data[0].id, listed.data[2].id]
    with pytest.raises(openai.NotFoundError):
        alice.conversations.items.retrieve(listed.data[1].id, conversation_id=made.id)

    deleted = alice.conversations.delete(made.id)
    assert deleted.deleted and deleted.id == made.id
    with pytest.raises(openai.NotFoundError):
        alice.conversations.retrieve(made.id)


def test_turns_are_added_to_the_conversation(server: RunningServer) -> None:
    alice = client(server)
    conversation = alice.conversations.create()
    first = alice.responses.create(model="scripted", input="my name is Ada", conversation=conversation.id)
    assert first.conversation is not None and first.conversation.id == conversation.id
    with alice.responses.stream(model="scripted", input="what is my name?", conversation={"id": conversation.id}) as stream:
        second = stream.get_final_response()
    items = alice.conversations.items.list(conversation.id, order="asc").data
    kinds = [(item.type, getattr(item, "role", None)) for item in items]
    assert kinds == [("message", "user"), ("message", "assistant"), ("message", "user"), ("message", "assistant")]
    assert items[1].id == first.output[0].id and items[3].id == second.output[0].id
    # The second turn saw the first: its stored input holds all three earlier messages.
    seen = [i.content[0].text for i in alice.responses.input_items.list(second.id, order="asc").data]
    assert seen[0] == "my name is Ada" and seen[-1] == "what is my name?" and len(seen) == 3


def test_another_key_cannot_see_or_use_a_conversation(server: RunningServer) -> None:
    alice, bob = client(server), client(server, "key-b")
    conversation = alice.conversations.create(items=[_message("user", "my secret is 42")])
    for call in (
        lambda: bob.conversations.retrieve(conversation.id),
        lambda: bob.conversations.items.list(conversation.id),
        lambda: bob.conversations.items.create(conversation.id, items=[_message("user", "x")]),
        lambda: bob.conversations.delete(conversation.id),
        lambda: bob.responses.create(model="scripted", input="what was it?", conversation=conversation.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert len(alice.conversations.items.list(conversation.id).data) == 1
    # A conversation's row is not a response, nor the other way round.
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(conversation.id)
    reply = alice.responses.create(model="scripted", input="hi")
    with pytest.raises(openai.NotFoundError):
        alice.conversations.retrieve(reply.id)


def test_errors_name_the_field(server: RunningServer) -> None:
    alice = client(server)
    with pytest.raises(openai.NotFoundError) as missing:
        alice.responses.create(model="scripted", input="hi", conversation="conv_nope")
    assert missing.value.param == "conversation"
    conversation = alice.conversations.create()
    first = alice.responses.create(model="scripted", input="hi")
    with pytest.raises(openai.BadRequestError) as both:
        alice.responses.create(model="scripted", input="hi", conversation=conversation.id, previous_response_id=first.id)
    assert both.value.param == "conversation"
    with pytest.raises(openai.BadRequestError) as many:
        alice.conversations.items.create(conversation.id, items=[_message("user", "x")] * 21)
    assert many.value.param == "items" and "20" in many.value.message
    with pytest.raises(openai.BadRequestError) as bad_item:
        alice.conversations.create(items=[{"type": "item_reference", "id": "msg_1"}])
    assert bad_item.value.param is not None and bad_item.value.param.startswith("items[0]")
    with pytest.raises(openai.BadRequestError) as metadata:
        alice.conversations.update(conversation.id, metadata={f"k{i}": "v" for i in range(17)})
    assert metadata.value.param == "metadata"


def test_a_conversation_past_the_store_bound_is_refused(tmp_path: Path) -> None:
    with serve(config_from_yaml(CONFIG.format(path=tmp_path / "r.sqlite3", max_bytes=1_048_576))) as small:
        alice = client(small)
        conversation = alice.conversations.create()
        with pytest.raises(openai.APIStatusError) as full:
            alice.conversations.items.create(conversation.id, items=[_message("user", "x" * 1_100_000)])
        assert full.value.status_code == 413 and "max_bytes" in full.value.message
        assert alice.conversations.items.list(conversation.id).data == []  # nothing half-written
