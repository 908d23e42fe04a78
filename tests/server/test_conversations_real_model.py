"""openai-agents' ``OpenAIConversationsSession`` against the real model over several
turns: the session keeps its history in ``/v1/conversations`` (create, items list and
create, delete), and ``conversation`` on ``responses.create`` carries a turn's history
from the same store."""

from __future__ import annotations

import asyncio

import openai
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.memory import OpenAIConversationsSession

from tests.support.server import RunningServer

MODEL = "smollm2:135m"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    set_tracing_disabled(True)  # traces would go to api.openai.com


def test_conversations_session_over_several_turns(real_server: RunningServer) -> None:
    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)
        agent = Agent(
            name="greeter", model=OpenAIResponsesModel(model=MODEL, openai_client=client),
            # Greedy, and prompts this model ends by itself (tests/server/test_responses_real_model.py).
            model_settings=ModelSettings(temperature=0, max_tokens=200),
        )  # fmt: skip
        session = OpenAIConversationsSession(openai_client=client)
        for turn in ("Say hello.", "Say hello.", "Say hello."):
            result = await Runner.run(agent, turn, session=session, max_turns=1)
            assert isinstance(result.final_output, str) and result.final_output
        items = await session.get_items()
        users = [item for item in items if item.get("role") == "user"]
        assert len(users) == 3 and len([i for i in items if i.get("role") == "assistant"]) == 3
        conversation = await client.conversations.retrieve(session.session_id)
        listed = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
        assert len(listed) == len(items)
        popped = await session.pop_item()
        assert popped is not None and popped.get("role") == "assistant" and len(await session.get_items()) == len(items) - 1
        await session.clear_session()
        with pytest.raises(openai.NotFoundError):
            await client.conversations.retrieve(conversation.id)

    asyncio.run(run())


def test_conversation_carries_history_to_the_model(real_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)
    conversation = client.conversations.create()
    first = client.responses.create(model=MODEL, input="Say hello.", conversation=conversation.id, max_output_tokens=16, temperature=0)
    second = client.responses.create(model=MODEL, input="Again.", conversation=conversation.id, max_output_tokens=16, temperature=0)
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # the first turn is in the prompt
    counted = client.responses.input_tokens.count(model=MODEL, conversation=conversation.id, input="Once more.")
    assert counted.input_tokens > second.usage.input_tokens
