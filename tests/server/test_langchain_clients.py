"""LangChain's OpenAI and Anthropic chat models as clients of the real default model over
real HTTP: Chat Completions, the Responses API (``use_responses_api``) and Anthropic
Messages, streamed and not, a forced tool call coming back as LangChain's parsed
``tool_calls``, usage, and OpenAI embeddings. (``langchain_ollama`` is in
test_completions.py and test_embeddings.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from tests.support.server import RunningServer

MODEL = "smollm2:135m"


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return "sunny"


def chat_models(server: RunningServer, max_tokens: int) -> dict[str, Any]:
    return {
        "chat": ChatOpenAI(model=MODEL, base_url=server.url + "/v1", api_key="x", max_tokens=max_tokens, max_retries=0),  # type: ignore[arg-type]
        "responses": ChatOpenAI(model=MODEL, base_url=server.url + "/v1", api_key="x", max_tokens=max_tokens, max_retries=0, use_responses_api=True),  # type: ignore[arg-type]
        "anthropic": ChatAnthropic(model=MODEL, base_url=server.url, api_key="x", max_tokens=max_tokens, max_retries=0),  # type: ignore[arg-type,call-arg]
    }


def text_of(content: Any) -> str:
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
def test_invoke_and_stream_give_the_same_text(real_server: RunningServer, kind: str) -> None:
    model = chat_models(real_server, 8)[kind]
    whole = model.invoke("Say hi")
    streamed = None
    for chunk in model.stream("Say hi"):
        streamed = chunk if streamed is None else streamed + chunk
    assert text_of(whole.content) and text_of(streamed.content) == text_of(whole.content)  # greedy: one answer
    assert whole.usage_metadata["output_tokens"] == 8 and whole.usage_metadata["input_tokens"] > 0


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
def test_a_forced_tool_call_is_parsed(real_server: RunningServer, kind: str) -> None:
    choice = "any" if kind == "anthropic" else "get_weather"
    model = chat_models(real_server, 60)[kind].bind_tools([get_weather], tool_choice=choice)
    reply = model.invoke("What is the weather in Paris?")
    assert [(c["name"], sorted(c["args"])) for c in reply.tool_calls] == [("get_weather", ["city"])]
    streamed = None
    for chunk in model.stream("What is the weather in Paris?"):
        streamed = chunk if streamed is None else streamed + chunk
    assert [c["name"] for c in streamed.tool_calls] == ["get_weather"]


def test_openai_embeddings(real_server: RunningServer) -> None:
    embeddings = OpenAIEmbeddings(model="all-minilm", base_url=real_server.url + "/v1", api_key="x", check_embedding_ctx_length=False)  # type: ignore[arg-type]
    one = embeddings.embed_query("a cat")
    assert len(one) == 384 and embeddings.embed_documents(["a cat", "a dog"])[0] == pytest.approx(one, abs=1e-5)
