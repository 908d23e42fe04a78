"""Prefix affinity (backends/upstream/affinity.py): a conversation's turns, or requests
sharing the client's prompt_cache_key, go to the endpoint that holds their prefix while it
is healthy and not the most loaded; the least loaded otherwise; and with ``affinity: none``
the turns spread as before."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from dragoman.adapters.canonical import ChatRequest, CompletionRequest, EmbedRequest, Message, TextPart
from dragoman.backends.upstream.affinity import affinity_key, rendezvous_order
from dragoman.backends.upstream.endpoints import EndpointPool
from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, serve

TEXT = Reply("openai/vllm_text.sse")


def chat(*texts: str, system: str = "", cache_key: str | None = None, model: str = "m") -> ChatRequest:
    roles = ["user", "assistant"] * len(texts)
    messages = [Message(role="system", parts=[TextPart(system)])] if system else []
    messages += [Message(role=role, parts=[TextPart(text)]) for role, text in zip(roles, texts)]
    return ChatRequest(model=model, messages=messages, cache_key=cache_key)


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (chat("plan a trip"), chat("plan a trip", "sure", "to Rome"), True),  # a later turn of one conversation
        (chat("plan a trip", system="be brief"), chat("plan a trip", "ok", "go", system="be brief"), True),
        (chat("plan a trip"), chat("write a poem"), False),
        (chat("plan a trip", system="a"), chat("plan a trip", system="b"), False),
        (chat("plan a trip"), chat("plan a trip", model="other"), False),
        (chat("one", cache_key="k"), chat("two", cache_key="k"), True),  # the client's key wins over the text
        (chat("one", cache_key="k"), chat("one", cache_key="j"), False),
        (CompletionRequest(model="m", prompt="def f("), CompletionRequest(model="m", prompt="def f(x):\n    return"), False),
    ],
)
def test_affinity_key_names_what_turns_share(first: ChatRequest, second: ChatRequest, same: bool) -> None:
    assert (affinity_key(first) == affinity_key(second)) is same


def test_embeddings_have_no_affinity() -> None:
    assert affinity_key(EmbedRequest(model="m", inputs=["x"])) is None


def pool(n: int, affinity: bool = True) -> EndpointPool:
    return EndpointPool([f"http://e{i}/v1" for i in range(n)], max_failures=1, cooldown=60, affinity=affinity, clock=lambda: 0.0)


def test_the_preferred_endpoint_comes_first_unless_it_is_the_most_loaded() -> None:
    endpoints = pool(3)
    key = b"conversation"
    preferred = endpoints.endpoints[rendezvous_order(key, [e.url for e in endpoints.endpoints])[0]]
    assert all(endpoints.order(key)[0] is preferred for _ in range(5))  # sequential turns: not rotated away
    others = [e for e in endpoints.endpoints if e is not preferred]
    preferred.outstanding, others[0].outstanding, others[1].outstanding = 2, 2, 0
    assert endpoints.order(key)[0] is preferred  # loaded, but not the most loaded
    preferred.outstanding = 3
    assert endpoints.order(key)[0] is others[1]  # the most loaded: the least loaded serves
    preferred.outstanding = 0
    endpoints.failed(preferred, "down")  # cooling (max_failures 1)
    assert preferred not in endpoints.order(key)[:2]


def test_an_endpoint_leaving_moves_only_its_own_keys() -> None:
    urls = [f"http://e{i}/v1" for i in range(4)]
    keys = [f"conversation {i}".encode() for i in range(400)]
    before = {key: urls[rendezvous_order(key, urls)[0]] for key in keys}
    fewer = urls[:3]
    after = {key: fewer[rendezvous_order(key, fewer)[0]] for key in keys}
    moved = [key for key in keys if before[key] != after[key]]
    assert moved and all(before[key] == urls[3] for key in moved)
    assert 60 < Counter(before.values()).most_common()[-1][1]  # and the keys spread (400 over 4)


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[ReplayServer]]:
    script: dict[str, Reply | list[Reply]] = {"sticky": TEXT, "spread": TEXT}
    with replay_server(script) as a, replay_server(script) as b, replay_server(script) as c:
        yield [a, b, c]


@pytest.fixture(scope="module")
def gateway(fleet: list[ReplayServer]) -> Iterator[RunningServer]:
    urls = ", ".join(f"{server.url}/v1" for server in fleet)
    config = config_from_yaml(
        f"""\
        models:
          - name: sticky
            backend: openai
            endpoints: [{urls}]
          - name: spread
            backend: openai
            endpoints: [{urls}]
            affinity: none
        """
    )
    with serve(config) as server:
        yield server


def conversation_turns(gateway: RunningServer, model: str, opening: str, turns: int = 3) -> None:
    messages = [{"role": "user", "content": opening}]
    for turn in range(turns):
        reply = httpx.post(gateway.url + "/v1/chat/completions", json={"model": model, "messages": messages}, timeout=10)
        assert reply.status_code == 200
        messages += [{"role": "assistant", "content": reply.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": f"and then {turn}?"}]


def servers_of(fleet: list[ReplayServer], model: str, opening: str) -> set[int]:
    return {i for i, server in enumerate(fleet) for r in server.requests_for(model) if r.json()["messages"][0]["content"] == opening}


def test_a_conversation_stays_on_one_endpoint_and_conversations_spread(gateway: RunningServer, fleet: list[ReplayServer]) -> None:
    openings = [f"conversation number {i}" for i in range(9)]
    for opening in openings:
        conversation_turns(gateway, "sticky", opening)
        conversation_turns(gateway, "spread", opening)
    sticky = [servers_of(fleet, "sticky", opening) for opening in openings]
    assert all(len(servers) == 1 for servers in sticky)
    assert len(set().union(*sticky)) >= 2  # nine conversations do not all hash to one endpoint
    # Today's balancing, alone, rotates the turns of a conversation over the endpoints.
    assert any(len(servers_of(fleet, "spread", opening)) > 1 for opening in openings)


def test_the_clients_prompt_cache_key_keeps_requests_together(gateway: RunningServer, fleet: list[ReplayServer]) -> None:
    for i in range(4):
        body = {"model": "sticky", "messages": [{"role": "user", "content": f"unrelated {i}"}], "prompt_cache_key": "session-7"}
        assert httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=10).status_code == 200
    servers = {i for i, server in enumerate(fleet) for r in server.requests_for("sticky")
               if r.json()["messages"][0]["content"].startswith("unrelated")}
    assert len(servers) == 1
