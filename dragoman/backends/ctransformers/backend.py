"""``CTransformersBackend``: GGML-family models through ctransformers 0.2.27.

The event loop never runs inference: each request borrows a model instance from the
pool (:mod:`backends.ctransformers.pool`) and generates on a worker thread
(:mod:`backends.ctransformers.generation`), posting text back to the loop. Files and
library instances come from :mod:`backends.ctransformers.loading`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, ClassVar

import msgspec

from dragoman.adapters.canonical import (
    ChatRequest,
    CompletionRequest,
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    Request,
    RoleStart,
    Timings,
    Usage,
)
from dragoman.adapters.errors import BackendError, ContextTooLong, RequestError, UnsupportedFeature
from dragoman.backends.admission import Admission
from dragoman.backends.base import Capabilities, LoadedModel, ModelDetails
from dragoman.backends.ctransformers import generation, loading
from dragoman.backends.ctransformers.formats import ModelFile
from dragoman.backends.ctransformers.pool import InstancePool
from dragoman.backends.ctransformers.prompt import (
    PRESET_STOPS,
    Preset,
    choose_preset,
    pieces_of,
    render_preset_segments,
)
from dragoman.backends.ctransformers.run import END, Refused, RequestRecord, Run
from dragoman.backends.ctransformers.sampling import SamplePlan, plan_sampling
from dragoman.backends.ctransformers.settings import CTransformersSettings
from dragoman.backends.residency import Residency
from dragoman.backends.text.chat_template import render_chat_segments
from dragoman.backends.text.fim import find_fim
from dragoman.backends.text.memory import check_context
from dragoman.backends.text.segments import Segment, fewest_tokens, prompt_bytes

log = logging.getLogger("dragoman.ctransformers")


class CTransformersBackend:
    Settings: ClassVar[type[msgspec.Struct]] = CTransformersSettings

    def __init__(self, route: Any) -> None:
        self.route = route
        self.settings: CTransformersSettings = route.settings
        self.name: str = route.config.name
        self.history: collections.deque[RequestRecord] = collections.deque(maxlen=100)
        self.residency = Residency(self.name, route.keep_alive, self._drop_instances)
        # The line in front of the instances, kept across reloads: a thread still
        # generating on an unloaded instance holds its slot (and its executor thread).
        self.admission = Admission(self.settings.max_concurrent, self.settings.max_queue)
        self._pool: InstancePool | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._file: ModelFile | None = None
        self._context_length = 0
        self._load_lock = asyncio.Lock()
        self._cancels: set[threading.Event] = set()
        self._ids = itertools.count(1)

    # -- discovery ---------------------------------------------------------------------

    def capabilities(self, model: str) -> Capabilities:
        file = self._inspect_quietly()
        return Capabilities(insert=file is not None and find_fim(file.special_tokens) is not None)

    def details(self, model: str) -> ModelDetails:
        file = self._inspect_quietly()
        if file is None:
            return ModelDetails(format="ggml")
        return ModelDetails(
            format="gguf" if file.container == "gguf" else "ggml",
            family=file.architecture,
            families=[file.architecture] if file.architecture else None,
            parameter_size=loading.parameter_size(file.parameters),
            quantization_level=file.quantization,
            size=file.size,
            context_length=self._context_length or self._wanted_context(file) or None,
            template=(file.chat_template or "") if self._uses_own_template(file) else self._preset(file),
            parameter_count=file.parameters or None,
            embedding_length=file.embedding_length,
            insert_template=fim.go_template() if (fim := find_fim(file.special_tokens)) else "",
        )

    def loaded(self) -> list[LoadedModel]:
        if self._pool is None or self._file is None:
            return []
        on_gpu = self.settings.gpu_layers > 0
        return [
            LoadedModel(
                name=self.name,
                size=self._file.size,
                size_vram=self._file.size if on_gpu else 0,
                expires_at=self.residency.expires_at,
                context_length=self._context_length,
                details=self.details(self.name),
            )
        ]

    async def list_models(self) -> list[str]:
        return []

    # -- lifetime ----------------------------------------------------------------------

    async def load(self, model: str, keep_alive: float | None) -> None:
        self.residency.check_open()
        await self._ensure_loaded()
        self.residency.loaded(keep_alive)

    async def unload(self, model: str | None = None) -> None:
        """Once the requests in flight are done (new ones are refused meanwhile)."""
        await self.residency.unload()

    async def _drop_instances(self) -> None:
        """A thread still generating keeps its instance until it stops."""
        async with self._load_lock:
            if self._pool is not None:
                self._pool.take_all()
                log.info("unloaded model '%s'", self.name)
            self._pool = None

    async def aclose(self) -> None:
        for cancel in list(self._cancels):
            cancel.set()
        self.residency.forget()
        await self._drop_instances()
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True)

    # -- chat --------------------------------------------------------------------------

    def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        return self._run(request, lambda file: self._chat_prompt(request, file))

    async def count_tokens(self, request: ChatRequest) -> int:
        """The prompt's length by the library's own tokenizer, on the worker thread. A
        prompt that cannot fit the context is refused as a generation would refuse it,
        before the library tokenises it (its tokenizer is slow on huge inputs)."""
        async with self.residency.request(request.keep_alive):
            await self._ensure_loaded()
            pool, file, executor = self._pool, self._file, self._executor
            assert pool is not None and file is not None and executor is not None
            segments, _ = self._chat_prompt(request, file)
            limit = self._context_limit(request)
            at_least = fewest_tokens(segments, file.longest_token_bytes)
            if at_least >= limit:
                raise ContextTooLong(
                    f"the prompt is {prompt_bytes(segments)} bytes, so at least {at_least} tokens; model "
                    f"'{self.name}' has a context of {limit}",
                    param="messages", prompt_tokens=at_least, context_length=limit, at_least=True,
                )  # fmt: skip
            llm = await pool.acquire(self.name)
            try:
                job = functools.partial(generation.tokenize, llm, pieces_of(segments, file.special_tokens), add_bos=file.add_bos)
                return len(await asyncio.wrap_future(executor.submit(job)))
            finally:
                pool.release(llm)

    def complete(self, request: CompletionRequest) -> AsyncIterator[Event]:
        """Templated: the chat it means. Raw: the prompt as it is, its special tokens
        special (api-mapping §7), and only the client's own stops. With a suffix: the
        model's FIM frame around the client's prefix and suffix, both plain text."""
        if request.templated and (request.context or request.return_context):
            # Ollama's token memory: the request stays a completion, its prompt the chat's.
            return self._run(request, lambda file: self._chat_prompt(request.as_chat(), file))
        if request.templated:
            return self.chat(request.as_chat())
        return self._run(request, lambda file: (self._completion(request, file), ()))

    def _context_limit(self, request: Request) -> int:
        """The model's context, or the request's ``num_ctx`` where that is smaller."""
        return min(self._context_length, request.options.num_ctx or self._context_length)

    def _completion(self, request: CompletionRequest, file: ModelFile) -> list[Segment]:
        if request.suffix is None:
            return [Segment(request.prompt)]
        fim = find_fim(file.special_tokens)
        if fim is None:  # checked before the request starts; the file may have changed since
            raise UnsupportedFeature(f"model '{self.name}' does not support insert", param="suffix")
        return fim.segments(request.prompt, request.suffix)

    def _chat_prompt(self, request: ChatRequest, file: ModelFile) -> tuple[list[Segment], tuple[str, ...]]:
        """The prompt's segments and the preset's stops (none for the file's own template)."""
        segments = self._render(request, file)
        return segments, () if self._uses_own_template(file) else PRESET_STOPS[self._preset(file)]

    async def _run(
        self, request: Request, prompt: Callable[[ModelFile], tuple[list[Segment], tuple[str, ...]]]
    ) -> AsyncIterator[Event]:
        async with self.residency.request(request.keep_alive):
            async with contextlib.aclosing(self._generate(request, prompt)) as events:
                async for event in events:
                    yield event

    async def _generate(
        self, request: Request, prompt: Callable[[ModelFile], tuple[list[Segment], tuple[str, ...]]]
    ) -> AsyncGenerator[Event, None]:
        began = time.perf_counter_ns()
        plan = plan_sampling(request.options)
        load_ns = await self._ensure_loaded()
        pool, file, executor = self._pool, self._file, self._executor
        assert pool is not None and file is not None and executor is not None
        segments, stops = prompt(file)
        if stops:
            plan = msgspec.structs.replace(plan, stop=plan.stop + stops)
        limit = self._context_limit(request)
        at_least = fewest_tokens(segments, file.longest_token_bytes)
        if at_least >= limit:  # refused before the library tokenises a megabyte
            raise ContextTooLong(
                f"the prompt is {prompt_bytes(segments)} bytes, so at least {at_least} tokens; model '{self.name}' "
                f"has a context of {limit}" + (" (num_ctx)" if request.options.num_ctx else ""),
                param="messages" if isinstance(request, ChatRequest) else "prompt",
            )
        memory = isinstance(request, CompletionRequest) and request.templated
        prefix = list(request.context or []) if isinstance(request, CompletionRequest) and memory else []
        # (the first check bounds the length before the library is asked anything)
        if prefix:
            check_context(prefix, vocab_size=2**31, context_length=limit)
        pieces: list[str | int] = [*prefix, *pieces_of(segments, file.special_tokens)]
        llm = await pool.acquire(self.name)
        if prefix:
            try:  # ids the library has no row for would read past its embedding table
                check_context(prefix, vocab_size=llm.vocab_size, context_length=limit)
            except RequestError:
                pool.release(llm)
                raise
        want_context = isinstance(request, CompletionRequest) and memory and request.return_context
        run = Run(asyncio.get_running_loop(), next(self._ids))
        job = functools.partial(self._work, llm, file, pieces, plan, limit, run, want_context)
        future = asyncio.wrap_future(executor.submit(job))
        self._cancels.add(run.cancel)
        future.add_done_callback(functools.partial(self._finished, run, pool, llm))
        done = False
        try:
            item = await run.queue.get()
            if item is END:
                self._raise_refusal(future, request)
            yield RoleStart(prompt_tokens=run.prompt_tokens)  # for Anthropic's message_start
            while item is not END:
                text, run.tokens = item
                yield ContentDelta(text)
                item = await run.queue.get()
            done = True
            yield self._finish(future, began, load_ns, run.context)
        finally:
            if not done:  # the client went away (or the stream was closed)
                run.cancel.set()
                run.tokens_at_cancel = max(run.tokens, run.generated)

    def _work(
        self, llm: Any, file: ModelFile, pieces: list[str | int], plan: SamplePlan, limit: int, run: Run,
        want_context: bool = False,
    ) -> generation.Outcome | Refused:
        """On the worker thread: tokenize, refuse a prompt that does not fit, generate;
        with ``want_context``, leave the ids of the prompt and the reply on ``run``."""
        tokens = generation.tokenize(llm, pieces, add_bos=file.add_bos)
        run.prompt_tokens = len(tokens)
        if len(tokens) >= limit:
            return Refused(len(tokens), limit)
        job = generation.Job(
            tokens,
            plan,
            limit,
            end_tokens=file.end_tokens,
            batch_size=self.settings.batch_size,
            threads=self.settings.threads or -1,
        )
        if not want_context:
            return generation.run(llm, job, run.emit, run.cancel)
        texts: list[str] = []

        def emit(text: str, generated: int) -> None:
            texts.append(text)
            run.emit(text, generated)

        outcome = generation.run(llm, job, emit, run.cancel)
        # As Ollama: the prompt and the reply tokenised again; no BOS, which the next
        # turn's prompt gets anyway.
        prompt = tokens[1:] if file.add_bos and tokens[:1] == [llm.bos_token_id] else tokens
        run.context = [*prompt, *generation.tokenize(llm, ["".join(texts)], add_bos=False)]
        return outcome

    def _finished(self, run: Run, pool: InstancePool, llm: Any, future: asyncio.Future[Any]) -> None:
        """On the loop, once the worker thread has stopped: only now is the instance free."""
        self._cancels.discard(run.cancel)
        pool.release(llm)
        outcome = None if future.cancelled() or future.exception() else future.result()
        if isinstance(outcome, generation.Outcome):
            record = RequestRecord(
                run.request_id, outcome.reason, outcome.prompt_tokens, outcome.completion_tokens, run.tokens_at_cancel
            )
            self.history.append(record)
        run.queue.put_nowait(END)

    def _raise_refusal(self, future: asyncio.Future[Any], request: Request) -> None:
        """The worker ended before any text: a refusal or failure becomes a clean
        HTTP error; an empty reply is not one."""
        error = future.exception()
        if error is not None:
            raise BackendError(f"model '{self.name}' failed: {type(error).__name__}: {error}") from error
        outcome = future.result()
        if isinstance(outcome, Refused):
            raise ContextTooLong(
                f"the prompt is {outcome.prompt_tokens} tokens; model '{self.name}' has a context of {outcome.limit}"
                + (" (num_ctx)" if request.options.num_ctx else ""),
                param="messages" if isinstance(request, ChatRequest) else "prompt",
                prompt_tokens=outcome.prompt_tokens,
                context_length=outcome.limit,
            )

    def _finish(self, future: asyncio.Future[Any], began: int, load_ns: int, context: list[int] | None = None) -> Event:
        error = future.exception()
        if error is not None:
            return ErrorEvent(f"model '{self.name}' failed while generating: {type(error).__name__}: {error}")
        outcome = future.result()
        assert isinstance(outcome, generation.Outcome)
        return Finish(
            reason="length" if outcome.reason == "length" else "stop",
            usage=Usage(prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens),
            stop_sequence=outcome.stop_sequence,
            timings=Timings(
                total_ns=time.perf_counter_ns() - began,
                load_ns=load_ns,
                prompt_eval_ns=outcome.prompt_eval_ns,
                eval_ns=outcome.eval_ns,
            ),
            context=context,
        )

    # -- prompt ------------------------------------------------------------------------

    def _render(self, request: ChatRequest, file: ModelFile) -> list[Segment]:
        protected = frozenset(file.special_tokens)
        if self._uses_own_template(file):
            tokens = {k: v for k, v in (("bos_token", file.bos_text), ("eos_token", file.eos_text)) if v}
            return render_chat_segments(file.chat_template or "", request.messages, tokens=tokens, protected=protected)
        return render_preset_segments(self._preset(file), request.messages, protected)

    def _uses_own_template(self, file: ModelFile) -> bool:
        return self.settings.template == "auto" and bool(file.chat_template)

    def _preset(self, file: ModelFile) -> Preset:
        return choose_preset(self.settings.template, file.special_tokens)

    # -- loading -----------------------------------------------------------------------

    async def _ensure_loaded(self) -> int:
        """Load the instances unless loaded; the nanoseconds spent loading."""
        async with self._load_lock:
            if self._pool is not None:
                return 0
            began = time.perf_counter_ns()
            file = await asyncio.to_thread(self._inspect)
            instances = await asyncio.to_thread(self._create_instances, file)
            self._file, self._context_length = file, instances[0].context_length
            self._pool = InstancePool(instances, self.admission)
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.settings.max_concurrent, thread_name_prefix=f"ctransformers-{self.name}"
                )
            took = time.perf_counter_ns() - began
            log.info("loaded model '%s' (%s, %d instances) in %.2fs", self.name, file.path, len(instances), took / 1e9)
            return took

    def _inspect(self) -> ModelFile:
        return loading.inspect(self.name, self.settings)

    def _inspect_quietly(self) -> ModelFile | None:
        if self._file is None:
            try:
                self._file = self._inspect()
            except BackendError:
                return None
        return self._file

    def _create_instances(self, file: ModelFile) -> list[Any]:
        return loading.create_instances(self.name, self.settings, file, self._wanted_context(file))

    def _wanted_context(self, file: ModelFile) -> int | None:
        return loading.wanted_context(self.route.config.context_length, file)

