"""Every client dialect through every upstream dialect: a dragoman whose four entries
reach a second dragoman (the scripted backend) as OpenAI chat, OpenAI Responses, Ollama
and Anthropic. Thinking and tool calls (whole, or streamed as fragments) survive every
pair, streamed and not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clients import CLIENTS, TOOL_FINISH
from tests.support.server import RunningServer, config_from_yaml, serve

UPSTREAMS = ["via-openai", "via-responses", "via-ollama", "via-anthropic"]
CALLS = {"tools": [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})],
         "fragments": [("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "UTC"})]}  # fmt: skip


@pytest.fixture(scope="module")
def bridge(scripted_server: RunningServer) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: via-openai, backend: openai, base_url: "{scripted_server.url}/v1", model: scripted}}
          - {{name: via-responses, backend: openai, api: responses, base_url: "{scripted_server.url}/v1", model: scripted}}
          - {{name: via-ollama, backend: ollama, base_url: "{scripted_server.url}", model: scripted}}
          - {{name: via-anthropic, backend: anthropic, base_url: "{scripted_server.url}", model: scripted}}
        """
    )
    with serve(config) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_thinking_survives(bridge: RunningServer, client: str, upstream: str, stream: bool) -> None:
    got = CLIENTS[client](bridge, upstream, "script:think", stream)
    assert (got["thinking"], got["text"], got["calls"]) == ("Let me think. ", "Done.", [])


@pytest.mark.parametrize("script", ["tools", "fragments"])
@pytest.mark.parametrize("upstream", UPSTREAMS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_tool_calls_survive(bridge: RunningServer, client: str, upstream: str, script: str) -> None:
    for stream in (False, True):
        got = CLIENTS[client](bridge, upstream, f"script:{script}", stream)
        assert (got["calls"], got["finish"]) == (CALLS[script], TOOL_FINISH[client]), (stream, got)
