"""The real default model through ``/v1/responses`` over HTTP with the official ``openai``
client: text, the stream and its final response, a forced function call, a conversation
of three turns by ``previous_response_id``, ``store: false`` and errors."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.support.server import RunningServer

MODEL = "smollm2:135m"
# A prompt this model ends by itself at temperature 0 (many others loop to the limit).
# Greedy text differs between CPUs by kernel rounding at near ties (tests/support/greedy.py):
# "Say hi" ended on AVX-512 and loops to 200 tokens on AVX2, where this one ends after 65.
ENDS = "Say hello."
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False},
}


@pytest.fixture(scope="module")
def client(real_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


def test_create_answers(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input=ENDS, temperature=0, max_output_tokens=200)
    assert response.status == "completed" and response.id.startswith("resp_") and response.model == MODEL
    assert response.output_text.startswith("Hello")
    assert response.usage.input_tokens > 10 and 0 < response.usage.output_tokens < 200
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


def test_stream_final_response_equals_create(client: openai.OpenAI) -> None:
    whole = client.responses.create(model=MODEL, input=ENDS, temperature=0, max_output_tokens=200)
    with client.responses.stream(model=MODEL, input=ENDS, temperature=0, max_output_tokens=200) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 1 and "".join(deltas) == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert client.responses.retrieve(final.id).output_text == final.output_text  # stored, as store defaults to true


def test_token_limit_is_incomplete(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Name a colour.", temperature=0, max_output_tokens=5)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 5


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_forced_function_call(client: openai.OpenAI, stream: bool) -> None:
    ask = {"model": MODEL, "input": "What's the weather in Paris?", "tools": [WEATHER],
           "tool_choice": {"type": "function", "name": "get_weather"}}  # fmt: skip
    if stream:
        with client.responses.stream(**ask) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**ask)
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])


def test_three_turns_by_previous_response_id(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=ENDS, temperature=0, max_output_tokens=40, instructions="You are terse.")
    second = client.responses.create(model=MODEL, input="What is 2+2?", previous_response_id=first.id, temperature=0, max_output_tokens=40)
    third = client.responses.create(model=MODEL, input="Thanks.", previous_response_id=second.id, temperature=0, max_output_tokens=40)
    assert (second.previous_response_id, third.previous_response_id) == (first.id, second.id)
    # Each turn read the whole conversation so far: its prompt holds the last turn's.
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens > first.usage.input_tokens
    items = list(client.responses.input_items.list(third.id, order="asc"))
    assert [(i.type, getattr(i, "role", None)) for i in items] == [
        ("message", "user"), ("message", "assistant"), ("message", "user"), ("message", "assistant"), ("message", "user"),
    ]  # fmt: skip
    assert items[1].content[0].text == first.output_text and items[4].content[0].text == "Thanks."
    # instructions belong to the response that named them, not to the ones after it
    assert first.instructions == "You are terse." and third.instructions is None
    page = client.responses.input_items.list(third.id, limit=2)
    assert len(page.data) == 2 and page.has_more and page.data[0].content[0].text == "Thanks."
    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    # The third turn stored its whole context: it still continues without the second.
    fourth = client.responses.create(model=MODEL, input="Bye.", previous_response_id=third.id, max_output_tokens=8)
    assert fourth.usage.input_tokens > third.usage.input_tokens


def test_store_false_keeps_nothing(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input=ENDS, store=False, max_output_tokens=8)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=MODEL, input="again", previous_response_id=response.id)
    assert info.value.body["param"] == "previous_response_id"


def test_errors(client: openai.OpenAI, real_server: RunningServer) -> None:
    with pytest.raises(openai.NotFoundError, match="model 'no-such-model' not found"):
        client.responses.create(model="no-such-model", input="hi")
    with pytest.raises(openai.BadRequestError) as long:
        client.responses.create(model=MODEL, input="word " * 3000)
    error = long.value.body
    assert error["code"] == "context_length_exceeded" and "2048" in error["message"]
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.responses.create(model=MODEL, input="hi", temperature=5)
    r = httpx.post(real_server.url + "/v1/responses", json={"model": MODEL, "input": [{"type": "item_reference", "id": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].type"
