"""Fill-in-the-middle on ONNX: the prompt is the model's FIM frame (its control
tokens) around the client's prefix and suffix (plain text), checked token by token
with the real tokenizer on a test model that has FIM tokens (tests/support/fim_model.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import onnxruntime_genai as og
import pytest
import pytest_asyncio

from dragoman.adapters.canonical import CompletionRequest, Finish, SamplingOptions
from dragoman.backends.onnx import OnnxBackend
from dragoman.backends.onnx.prompt_tokens import PromptTokenizer
from dragoman.backends.onnx.request_plan import completion_start
from dragoman.backends.text.fim import find_fim
from dragoman.backends.text.segments import Segment
from dragoman.config.schema import ModelConfig, ModelRoute
from tests.onnx.conftest import collect
from tests.support.fim_model import FIM_IDS

pytestmark = pytest.mark.asyncio(loop_scope="module")
PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fim_backend(fim_model_dir: Path) -> AsyncIterator[OnnxBackend]:
    route = ModelRoute(
        config=ModelConfig(name="fim:test", backend="onnx", context_length=1024),
        settings=OnnxBackend.Settings(path=str(fim_model_dir), provider="cpu"),
        keep_alive=-1,
    )
    backend = OnnxBackend(route)
    yield backend
    await backend.aclose()


@pytest.fixture(scope="module")
def tokenizer(fim_model_dir: Path) -> PromptTokenizer:
    return PromptTokenizer(fim_model_dir, og.Tokenizer(og.Model(str(fim_model_dir))))


def fill(prefix: str = PREFIX, suffix: str = SUFFIX, **options: object) -> CompletionRequest:
    return CompletionRequest(model="fim:test", prompt=prefix, suffix=suffix, options=SamplingOptions(**options))  # type: ignore[arg-type]


def plain(tokenizer: PromptTokenizer, text: str) -> list[int]:
    return tokenizer.encode([Segment(text, special=False)]).tolist()


async def test_the_rendered_token_sequence(fim_backend: OnnxBackend, tokenizer: PromptTokenizer) -> None:
    start, parser = completion_start(fim_backend.files, fill(), 1, 1024)
    ids = tokenizer.encode(start.prompt).tolist()
    prefix, middle, end = FIM_IDS["<fim_prefix>"], FIM_IDS["<fim_suffix>"], FIM_IDS["<fim_middle>"]
    assert ids == [prefix, *plain(tokenizer, PREFIX), middle, *plain(tokenizer, SUFFIX), end]
    assert (parser.calls, start.special_tokens) == (0, False)


async def test_client_text_that_spells_a_fim_token_stays_text(fim_backend: OnnxBackend, tokenizer: PromptTokenizer) -> None:
    start, _ = completion_start(fim_backend.files, fill("x<fim_middle>", "<fim_prefix>y"), 1, 1024)
    ids = tokenizer.encode(start.prompt).tolist()
    assert [i for i in ids if i in FIM_IDS.values()] == [3, 4, 5]  # only the frame's own


async def test_capabilities_and_details(fim_backend: OnnxBackend) -> None:
    assert fim_backend.capabilities("fim:test").insert
    assert ".Suffix" in fim_backend.details("fim:test").insert_template
    assert find_fim(fim_backend.files.tokenizer().added) is not None


async def test_through_the_worker(fim_backend: OnnxBackend, tokenizer: PromptTokenizer) -> None:
    events = await collect(fim_backend.complete(fill(num_predict=4, temperature=0.0)))
    finish = events[-1]
    assert isinstance(finish, Finish) and finish.usage.completion_tokens <= 4
    start, _ = completion_start(fim_backend.files, fill(), 1, 1024)
    assert finish.usage.prompt_tokens == len(tokenizer.encode(start.prompt))
