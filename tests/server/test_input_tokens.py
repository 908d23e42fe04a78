"""Counting before sending: ``client.responses.input_tokens.count`` (the openai SDK) and
llama-server's ``/v1/chat/completions/input_tokens``, against the real model: the count
equals the prompt tokens the same request then reports in its usage."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.server import RunningServer

MODEL = "smollm2:135m"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def client(real_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


def test_count_equals_the_usage_of_the_same_request(client: openai.OpenAI) -> None:
    ask = {"model": MODEL, "input": "Say hello.", "instructions": "Be brief.", "tools": [WEATHER]}
    counted = client.responses.input_tokens.count(**ask)
    assert counted.object == "response.input_tokens"
    used = client.responses.create(**ask, max_output_tokens=1, store=False).usage.input_tokens
    assert counted.input_tokens == used
    without_tools = client.responses.input_tokens.count(model=MODEL, input="Say hello.", instructions="Be brief.")
    assert without_tools.input_tokens < counted.input_tokens  # the tool definitions are in the prompt


def test_count_continues_a_stored_response(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="Name a colour.", max_output_tokens=8, temperature=0)
    counted = client.responses.input_tokens.count(model=MODEL, previous_response_id=first.id, input="Another one.")
    used = client.responses.create(model=MODEL, previous_response_id=first.id, input="Another one.", max_output_tokens=1)
    assert counted.input_tokens == used.usage.input_tokens > first.usage.input_tokens


def test_chat_completions_count(real_server: RunningServer, client: openai.OpenAI) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}]}
    counted = httpx.post(real_server.url + "/v1/chat/completions/input_tokens", json=body).json()
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=1)
    used = reply.usage.prompt_tokens if reply.usage else None
    assert counted == {"input_tokens": used, "object": "response.input_tokens"}


def test_errors_name_the_field(real_server: RunningServer, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.input_tokens.count(model=MODEL, previous_response_id="resp_nope", input="hi")
    assert missing.value.param == "previous_response_id"
    no_model = httpx.post(real_server.url + "/v1/responses/input_tokens", json={"input": "hi"})
    assert no_model.status_code == 400 and "model" in no_model.json()["error"]["message"]
    unknown = httpx.post(real_server.url + "/v1/responses/input_tokens", json={"model": "nope", "input": "hi"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
