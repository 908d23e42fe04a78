"""A dragoman serving the local ONNX model is the upstream of a second dragoman, in both
dialect directions, through the official clients: at temperature 0 the bridged
answer is the direct answer, streamed or not."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import ollama
import openai
import pytest

from tests.support.server import RunningServer, config_from_yaml, serve

MODEL = "smollm2:135m"
QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def bridge(real_server: RunningServer) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: via-openai, backend: openai, base_url: "{real_server.url}/v1", model: "{MODEL}"}}
          - {{name: via-ollama, backend: ollama, base_url: "{real_server.url}", model: "{MODEL}"}}
          - {{name: via-anthropic, backend: anthropic, base_url: "{real_server.url}", model: "{MODEL}"}}
          - {{name: via-responses, backend: openai, api: responses, base_url: "{real_server.url}/v1", model: "{MODEL}"}}
        """
    )
    with serve(config) as server:
        yield server


def openai_answer(server: RunningServer, model: str, stream: bool) -> str:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    if not stream:
        reply = client.chat.completions.create(model=model, messages=QUESTION, temperature=0, max_tokens=MAX_TOKENS)
        return reply.choices[0].message.content or ""
    chunks = client.chat.completions.create(
        model=model, messages=QUESTION, temperature=0, max_tokens=MAX_TOKENS, stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def ollama_answer(server: RunningServer, model: str, stream: bool) -> str:
    client = ollama.Client(host=server.url)
    options = {"temperature": 0, "num_predict": MAX_TOKENS}
    if not stream:
        return client.chat(model=model, messages=QUESTION, options=options).message.content or ""
    return "".join(p.message.content or "" for p in client.chat(model=model, messages=QUESTION, options=options, stream=True))


def anthropic_answer(server: RunningServer, model: str, stream: bool) -> str:
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    ask = {"model": model, "messages": QUESTION, "max_tokens": MAX_TOKENS, "extra_body": {"temperature": 0}}
    if not stream:
        return "".join(b.text for b in client.messages.create(**ask).content if b.type == "text")
    with client.messages.stream(**ask) as events:
        return "".join(events.text_stream)


def responses_answer(server: RunningServer, model: str, stream: bool) -> str:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    ask = {"model": model, "input": QUESTION, "temperature": 0, "max_output_tokens": MAX_TOKENS, "store": False}
    if not stream:
        return client.responses.create(**ask).output_text
    with client.responses.stream(**ask) as events:
        return "".join(e.delta for e in events if e.type == "response.output_text.delta")


ANSWERS = {"openai": openai_answer, "ollama": ollama_answer, "anthropic": anthropic_answer, "responses": responses_answer}
DIRECTIONS = [
    # (name, client dialect, bridge entry, i.e. the dialect the bridge speaks upstream)
    ("openai client, ollama upstream", "openai", "via-ollama"),
    ("ollama client, openai upstream", "ollama", "via-openai"),
    ("openai client, openai upstream", "openai", "via-openai"),
    ("ollama client, ollama upstream", "ollama", "via-ollama"),
    ("anthropic client, anthropic upstream", "anthropic", "via-anthropic"),
    ("anthropic client, ollama upstream", "anthropic", "via-ollama"),
    ("openai client, anthropic upstream", "openai", "via-anthropic"),
    ("responses client, responses upstream", "responses", "via-responses"),
    ("responses client, openai upstream", "responses", "via-openai"),
    ("ollama client, responses upstream", "ollama", "via-responses"),
    ("anthropic client, responses upstream", "anthropic", "via-responses"),
    ("responses client, anthropic upstream", "responses", "via-anthropic"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("name", "client", "entry"), DIRECTIONS, ids=[d[0] for d in DIRECTIONS])
def test_bridged_answer_equals_direct_answer(
    real_server: RunningServer, bridge: RunningServer, name: str, client: str, entry: str, stream: bool
) -> None:
    answer = ANSWERS[client]
    direct = answer(real_server, MODEL, stream)
    assert direct.strip()  # the model did answer: equality below is not of two empty strings
    assert answer(bridge, entry, stream) == direct
