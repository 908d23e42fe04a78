"""Backends on the real default model (built once by the top-level ``model_home`` fixture)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dragoman.adapters.canonical import ChatRequest, Event, Message, SamplingOptions, TextPart
from dragoman.backends.onnx import OnnxBackend
from dragoman.config.schema import ModelConfig, ModelRoute

MODEL_NAME = "smollm2:135m"


@pytest.fixture(scope="session")
def make_backend(model_dir: Path) -> Callable[..., OnnxBackend]:
    def make(*, keep_alive: float = -1, context_length: int | None = 1024, **settings: Any) -> OnnxBackend:
        route = ModelRoute(
            config=ModelConfig(name=MODEL_NAME, backend="onnx", context_length=context_length),
            settings=OnnxBackend.Settings(**{"path": str(model_dir), "provider": "cpu", **settings}),
            keep_alive=keep_alive,
        )
        return OnnxBackend(route)

    return make


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(make_backend: Callable[..., OnnxBackend]) -> AsyncIterator[OnnxBackend]:
    """One loaded model shared by a module's tests (loading costs about a second)."""
    shared = make_backend()
    await shared.load(MODEL_NAME, None)
    yield shared
    await shared.aclose()


def ask(text: str, **options: Any) -> ChatRequest:
    extra = {k: options.pop(k) for k in list(options) if k not in SamplingOptions.__struct_fields__}
    return ChatRequest(
        model=MODEL_NAME,
        messages=[Message(role="user", parts=[TextPart(text)])],
        options=SamplingOptions(**options),
        **extra,
    )


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]
