"""The ``onnx`` backend's settings (its keys of a model entry) and its records."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

import msgspec

from dragoman.backends.text.output_parsers import ReasoningParser, ToolParser
from dragoman.backends.onnx.worker_protocol import SpinChoice
from dragoman.backends.onnx.embeddings.model_facts import PoolingChoice
from dragoman.backends.onnx.providers import ProviderChoice

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]


class OnnxSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The ``onnx`` backend's keys of a model entry."""

    # Model folder (genai_config.json, model.onnx, tokenizer); unset = the default
    # SmolLM2-135M-Instruct int4, built on first load when ``prepare`` is true.
    path: str | None = None
    # Or a model built by `dragoman models prepare`: its folder name under
    # DRAGOMAN_HOME/models, or the name it was prepared under (then the build for
    # the entry's provider is used).
    model: str | None = None
    provider: ProviderChoice = "auto"
    provider_options: dict[str, str] = {}
    threads: PositiveInt | None = None
    # The batch engine's intra-op threads spin between the ops of a pass (and stop when
    # it returns): faster on idle cores, much slower on cores other work is using.
    # "auto": spin while other processes leave the cores alone (Linux, models up to
    # 512 MiB of weights; a second session of the model, see dragoman/backends/onnx/worker/core_watch.py).
    spin: SpinChoice = "auto"
    template: str | None = None  # a Jinja chat template overriding the model's
    tool_parser: ToolParser = "hermes"
    reasoning_parser: ReasoningParser = "think"
    max_concurrent: PositiveInt = 8
    max_queue: Annotated[int, msgspec.Meta(ge=0)] = 16
    prepare: bool = True
    parameter_size: str | None = None
    quantization_level: str | None = None
    # How generations run (dragoman/backends/onnx/worker/batch_engine.py): "auto" batches concurrent requests
    # in one forward pass on CPU (the library's Generator elsewhere, and for models the
    # batch engine cannot run); "generator" always uses the library's Generator.
    engine: Literal["auto", "batch", "generator"] = "auto"
    # KV state of recent prompts kept so the next request sharing a prefix (the next
    # turn of a chat, the same system prompt) skips computing it. 0 turns it off.
    prefix_cache_mib: Annotated[int, msgspec.Meta(ge=0)] = 256
    prefix_cache_entries: PositiveInt = 16
    # ``embed``: an embedding model (an encoder export, or a decoder export that
    # outputs hidden_states); unset ``path`` is then the default all-MiniLM-L6-v2.
    task: Literal["chat", "embed"] = "chat"
    pooling: PoolingChoice = "auto"  # auto: the model's 1_Pooling config, else last (decoder) / mean
    batch_size: PositiveInt = 32  # embedding rows per model run
    batch_tokens: PositiveInt = 4096  # padded tokens per model run
    # A worker silent this long while requests run is killed (they end with an error)
    # and replaced by the next request.
    stall_timeout: PositiveSeconds = 30.0
    # Bounds on compiling one request's grammar (structured output, forced tool calls);
    # past either, the request is refused with 400. The memory bound is enforced on
    # Linux (RLIMIT_AS of the compiling process); elsewhere the time bound holds.
    grammar_timeout: PositiveSeconds = 5.0
    grammar_memory: Annotated[int, msgspec.Meta(ge=64 * 1024 * 1024)] = 512 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.path is not None and self.model is not None:
            raise ValueError("set either 'path' (a model folder) or 'model' (a built model's name), not both")


class CancelRecord(msgspec.Struct):
    """What happened to a request the client abandoned. The worker's confirmation
    (``worker_tokens``) says how many tokens it generated in all: never more than
    ``tokens_consumed + RUN_AHEAD``, however slowly the client read."""

    request_id: int
    tokens_consumed: int  # taken by the client when it left
    worker_tokens: int | None = None
    tokens_after_confirm: int = 0  # must stay 0: nothing runs after the confirmation
    confirmed: asyncio.Event = msgspec.field(default_factory=asyncio.Event)
