"""An entry's embedding model: loaded on first use, batched, unloaded when idle.

Used by both kinds of ``onnx`` entry: ``task: embed`` entries (encoder exports, or a
decoder export used only for vectors) and chat entries whose ONNX graph also outputs
``hidden_states``, which then answer ``/api/embed`` as Ollama's chat models do.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dragoman.adapters.canonical import EmbedRequest, EmbedResult, Timings
from dragoman.adapters.embeddings import shape_vectors
from dragoman.adapters.errors import BackendError
from dragoman.backends.base import LoadedModel, ModelDetails
from dragoman.backends.onnx.embeddings.batches import BatchQueue
from dragoman.backends.onnx.embeddings.model_facts import EmbeddingFacts, read_facts
from dragoman.backends.onnx.settings import OnnxSettings
from dragoman.backends.residency import Residency

log = logging.getLogger("dragoman.onnx.embed")

INLINE_TOKENIZE_CHARS = 2048


class OnnxEmbedder:
    def __init__(self, name: str, settings: OnnxSettings, folder: Path, keep_alive: float, context: int | None) -> None:
        self.name = name
        self.settings = settings
        self.folder = folder
        self.keep_alive = keep_alive
        self.context = context
        self.residency = Residency(name, keep_alive, self._drop)
        self._runner: Any = None
        self._queue: BatchQueue | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._facts: EmbeddingFacts | None = None
        self._lock = asyncio.Lock()

    # -- facts ------------------------------------------------------------------------------

    def facts(self) -> EmbeddingFacts | None:
        if self._facts is None:
            try:
                self._facts = read_facts(self.folder, self.settings.pooling, self.context)
            except FileNotFoundError:
                return None
        return self._facts

    def details(self) -> ModelDetails:
        facts = self.facts()
        if facts is None:
            return ModelDetails(format="onnx")
        return ModelDetails(
            format="onnx",
            family=facts.family,
            families=[facts.family] if facts.family else None,
            parameter_size=self.settings.parameter_size or facts.parameter_size,
            quantization_level=self.settings.quantization_level or facts.quantization_level,
            size=facts.size,
            context_length=facts.max_length,
        )

    @property
    def loaded_provider(self) -> str | None:
        return None if self._runner is None else str(self._runner.provider)

    def loaded(self) -> list[LoadedModel]:
        if self._runner is None:
            return []
        details = self.details()
        on_device = self._runner.provider != "CPUExecutionProvider"
        return [
            LoadedModel(
                name=self.name,
                size=details.size,
                size_vram=details.size if on_device else 0,
                expires_at=self.residency.expires_at,
                context_length=details.context_length,
                details=details,
            )
        ]

    # -- lifetime ---------------------------------------------------------------------------

    async def load(self, keep_alive: float | None = None) -> int:
        """An explicit load: the model then stays ``keep_alive`` (as residency says)."""
        self.residency.check_open()
        took = await self._load()
        self.residency.loaded(keep_alive)
        return took

    async def _load(self) -> int:
        """Load unless loaded; the nanoseconds it took."""
        async with self._lock:
            if self._runner is not None:
                return 0
            began = time.perf_counter_ns()
            await self._ensure_built()
            self._facts = None
            facts = self.facts()
            if facts is None:
                raise BackendError(f"model '{self.name}': {self.folder} holds no model.onnx")
            from dragoman.backends.onnx.embeddings.runner import EmbeddingRunner

            s = self.settings
            runner = await asyncio.to_thread(
                EmbeddingRunner, self.folder, facts, provider=s.provider, provider_options=s.provider_options,
                threads=s.threads, batch_tokens=s.batch_tokens,
            )  # fmt: skip
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"embed-{self.name}")
            self._queue = BatchQueue(runner.run, self._executor, batch_size=s.batch_size, batch_tokens=runner.batch_tokens)
            self._runner = runner
            log.info("loaded embedding model '%s' on %s in %.2fs", self.name, runner.provider, (time.perf_counter_ns() - began) / 1e9)
        return time.perf_counter_ns() - began

    async def _ensure_built(self) -> None:
        from dragoman.backends.onnx.embeddings import build

        if build.is_prepared(self.folder) or (self.folder / "model.onnx").is_file():
            return
        model = build.default_model_at(self.folder)
        if model is None:
            raise BackendError(f"model '{self.name}': {self.folder} holds no model.onnx")
        if not self.settings.prepare:
            raise BackendError(f"model '{self.name}' is not built yet; run: dragoman models prepare {model}")
        try:
            await build.prepare_in_subprocess(model, self.folder)
        except build.PrepareError as exc:
            raise BackendError(f"model '{self.name}': {exc}") from exc

    async def unload(self) -> None:
        """Once the requests in flight are done (new ones are refused meanwhile)."""
        await self.residency.unload()

    async def close(self) -> None:
        self.residency.forget()
        await self._drop()

    async def _drop(self) -> None:
        async with self._lock:
            runner, self._runner = self._runner, None
            executor, self._executor = self._executor, None
            self._queue = None
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
            if runner is not None:
                log.info("unloaded embedding model '%s'", self.name)

    # -- work -------------------------------------------------------------------------------

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        began = time.perf_counter_ns()
        async with self.residency.request(request.keep_alive):
            load_ns = await self._load()
            runner, queue = self._runner, self._queue
            if runner is None or queue is None:
                raise BackendError(f"model '{self.name}' was unloaded while the request waited")
            limit = runner.limit(request.num_ctx)
            tokenize = functools.partial(
                runner.tokenize, request.inputs, limit=limit, truncate=request.truncate, max_tokens=request.max_tokens
            )
            # Small requests are tokenized here (tens of microseconds of Rust): a thread
            # hop costs more, up to the 5 ms GIL switch interval on a busy machine.
            small = sum(len(i) for i in request.inputs) <= INLINE_TOKENIZE_CHARS
            rows = tokenize() if small else await asyncio.to_thread(tokenize)
            eval_began = time.perf_counter_ns()
            vectors = await queue.submit(rows)
            if runner.facts.normalizes:  # the model's own pipeline ends in Normalize
                vectors = shape_vectors(vectors, dimensions=None, normalize=True)
        now = time.perf_counter_ns()
        timings = Timings(total_ns=now - began, load_ns=load_ns, prompt_eval_ns=now - eval_began)
        return EmbedResult(vectors=vectors, prompt_tokens=sum(len(r) for r in rows), timings=timings)
