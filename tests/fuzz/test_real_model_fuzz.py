"""Valid requests with sampling knobs at their edges, to the real default model (SmolLM2
on ONNX Runtime GenAI), a few tokens each: never a 5xx, never a broken stream.

The scripted backend ignores these knobs; a real one hands them to msgpack and C++,
where a seed past 64 bits, a negative min_p or a keep_alive of 1e300 s came back as a
500 before the wire types bounded them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.replies import check_ollama_reply, check_openai_reply
from tests.fuzz.strategies import texts
from tests.support.server import RunningServer

MODEL = "smollm2:135m"
MAX_TOKENS = 3
REAL_FUZZ = settings(
    max_examples=15, deadline=None, database=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def client(real_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=real_server.url, timeout=60) as http:
        yield http


# In range for the wire types, at the edges of what a C++ library takes.
EDGE_INTS = [0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, -(2**63)]
unit = st.one_of(st.sampled_from([0.0, 1.0, 5e-324, 0.5]), st.floats(0, 1))
knobs = {
    "temperature": st.one_of(st.sampled_from([0.0, 2.0, 1e-300]), st.floats(0, 2)),
    "top_p": unit,
    "min_p": unit,
    "top_k": st.sampled_from([n for n in EDGE_INTS if n >= 0]),
    "seed": st.sampled_from(EDGE_INTS),
    "repeat_penalty": st.one_of(st.sampled_from([0.0, -1.0, 1e300, -1e300]), st.floats(allow_nan=False, allow_infinity=False)),
    "presence_penalty": st.floats(-2, 2),
    "frequency_penalty": st.floats(-2, 2),
}
ollama_only = {
    "repeat_last_n": st.sampled_from([*EDGE_INTS, -2]),
    "num_ctx": st.sampled_from(EDGE_INTS),
    "mirostat": st.sampled_from([0, 1, 2]),
    "mirostat_tau": st.floats(allow_nan=False, allow_infinity=False),
    "mirostat_eta": st.floats(allow_nan=False, allow_infinity=False),
    "tfs_z": st.floats(allow_nan=False, allow_infinity=False),
}
messages = st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": texts}), min_size=1, max_size=2)
keep_alive = st.one_of(st.none(), st.sampled_from([0, -1, 1e300, 2**63 - 1, "-1", "5m", "1e300s", "999999999999h"]))
formats = st.sampled_from([None, "json", {"type": "object"}, {"type": "integer", "minimum": 2**63 - 1}])

openai_bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": messages, "max_tokens": st.just(MAX_TOKENS)},
    optional={
        **knobs,
        "stream": st.booleans(),
        "logprobs": st.just(True),
        "top_logprobs": st.integers(0, 20),
        "keep_alive": keep_alive,
        "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}]),
        "stop": st.lists(texts, max_size=3),
    },
)
ollama_bodies = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "messages": messages,
        "options": st.fixed_dictionaries({"num_predict": st.just(MAX_TOKENS)}, optional={**knobs, **ollama_only}),
    },
    optional={
        "stream": st.booleans(),
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 20),
        "keep_alive": keep_alive,
        "format": formats,
    },
)

ROUTES = [
    ("openai", "/v1/chat/completions", openai_bodies, check_openai_reply),
    ("ollama", "/api/chat", ollama_bodies, check_ollama_reply),
]


@pytest.mark.parametrize(("dialect", "path", "strategy", "check"), ROUTES, ids=[r[0] for r in ROUTES])
def test_real_model_answers_any_well_typed_body_cleanly(
    client: httpx.Client, dialect: str, path: str, strategy: Any, check: Any
) -> None:
    @REAL_FUZZ
    @given(body=strategy)
    def post(body: dict[str, Any]) -> None:
        response = client.post(path, content=msgspec.json.encode(body), headers={"Content-Type": "application/json"})
        check(response, expected=None)

    post()
