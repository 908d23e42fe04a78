"""``OnnxBackend``: a local model served by ONNX Runtime GenAI in a worker process.

The server's event loop never runs inference: the worker (:mod:`backends.onnx.worker.process`)
does, interleaving every active request a token at a time. This side plans the request
(:mod:`backends.onnx.request_plan`), bounds the queue, turns worker reports into canonical
events, credits the worker with what its consumer has taken, and unloads the model as
:mod:`backends.residency` says. Starting, stopping and cancelling on the worker:
:mod:`backends.onnx.worker_slot`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, ClassVar, NoReturn

import msgspec

from dragoman.adapters.canonical import (
    ChatRequest,
    CompletionRequest,
    EmbedRequest,
    EmbedResult,
    ErrorEvent,
    Event,
    Finish,
    PromptProgress,
    Request,
    RoleStart,
    Timings,
    Usage,
)
from dragoman.adapters.errors import BackendError, ContextTooLong, RequestError, UnsupportedFeature
from dragoman.backends.admission import Admission
from dragoman.backends.base import Capabilities, Engine, LoadedModel, ModelDetails
from dragoman.backends.onnx.client import WorkerGone
from dragoman.backends.onnx.embeddings.model_facts import has_hidden_states, read_facts
from dragoman.backends.onnx.embeddings.service import OnnxEmbedder
from dragoman.backends.onnx.model_files import ModelFiles
from dragoman.backends.text.output_parsers import LogprobsPairing, OutputParser
from dragoman.backends.onnx.prepare import is_prepared, missing_build_tools
from dragoman.backends.onnx.prompt_tokens import PromptTokenizer
from dragoman.backends.onnx.memory import context_ids, with_memory
from dragoman.backends.onnx.request_plan import chat_prompt, chat_start, completion_start
from dragoman.backends.onnx.worker_protocol import RUN_AHEAD, Credit, Done, Failed, FrameTooLarge, Progress, Refused, Report, Start, Started, Tokens
from dragoman.backends.onnx.providers import flavour_problem
from dragoman.backends.onnx.settings import OnnxSettings
from dragoman.backends.onnx.worker_slot import WorkerSlot, engine_text
from dragoman.backends.residency import Residency
from dragoman.backends.pull import ProgressCallback, PullProgress
from dragoman.backends.text.chat_template import supports_thinking
from dragoman.backends.text.fim import find_fim


class OnnxBackend:
    Settings: ClassVar[type[msgspec.Struct]] = OnnxSettings

    def __init__(self, route: Any) -> None:
        self.route = route
        self.settings: OnnxSettings = route.settings
        self.name: str = route.config.name
        self.admission = Admission(self.settings.max_concurrent, self.settings.max_queue)
        self.counters: collections.Counter[str] = collections.Counter()
        self._ids = itertools.count(1)
        self.files = ModelFiles(self.name, self.settings, route.config.context_length)
        self.slot = WorkerSlot(self.name, self.settings, self.files, on_start=self._forget_counter)
        self.residency = Residency(self.name, route.keep_alive, self.slot.stop)
        self._counter: PromptTokenizer | None = None  # for count_tokens, read on first use
        self._embedder: OnnxEmbedder | None = None  # for models whose graph outputs hidden_states

    @classmethod
    def for_route(cls, route: Any) -> Any:
        """The backend for one entry: ``task: embed`` entries get the embedding one."""
        if route.settings.task == "embed":
            from dragoman.backends.onnx.embeddings.backend import OnnxEmbeddingBackend

            return OnnxEmbeddingBackend(route)
        return cls(route)

    @staticmethod
    def preflight(settings: OnnxSettings) -> str | None:
        """Checked before the server starts: a missing or doubled onnxruntime-genai
        flavour is a problem to fix now, not at the first request."""
        return flavour_problem(settings.provider)

    # -- discovery ---------------------------------------------------------------------

    def capabilities(self, model: str) -> Capabilities:
        thinking = self.settings.reasoning_parser == "think" and supports_thinking(self.files.chat_template())
        return Capabilities(
            tools=self.settings.tool_parser != "none",
            vision=False,
            thinking=thinking,
            json_schema=True,
            logprobs=True,
            insert=find_fim(self.files.tokenizer().added) is not None,
            embedding=has_hidden_states(self.files.folder()),
            logit_bias=True,
            prompt_progress=True,
        )

    def embedding_length(self) -> int | None:
        folder = self.files.folder()
        return read_facts(folder, "last", None).dimensions if has_hidden_states(folder) else None

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        """Last-token pooled final hidden states (see dragoman/backends/onnx/embeddings/model_facts.py),
        from an ONNX Runtime session over the same graph, beside the chat worker."""
        folder = self.files.folder()
        if not has_hidden_states(folder):
            raise UnsupportedFeature(f"model '{request.model}' does not support embeddings", param="model")
        if self._embedder is None:
            self._embedder = OnnxEmbedder(self.name, self.settings, folder, self.route.keep_alive, self.route.config.context_length)
        return await self._embedder.embed(request)

    def details(self, model: str) -> ModelDetails:
        facts = self.files.facts()
        family = facts.family
        return ModelDetails(
            format="onnx",
            family=family,
            families=[family] if family else None,
            parameter_size=self.settings.parameter_size or facts.parameter_size,
            quantization_level=self.settings.quantization_level or facts.quantization_level,
            size=facts.size,
            context_length=self.files.configured_context(),
            template=self.files.chat_template(),
            parameter_count=facts.parameter_count,
            embedding_length=self.embedding_length() or facts.embedding_length,
            insert_template=fim.go_template() if (fim := find_fim(self.files.tokenizer().added)) else "",
            end_tokens=[t for i in facts.eos_token_ids if (t := self.files.tokenizer().added_by_id.get(i))],
        )

    def loaded(self) -> list[LoadedModel]:
        worker = self.slot.worker
        if worker is None or not worker.alive:
            return self._embedder.loaded() if self._embedder is not None else []
        size = self.files.facts().size
        on_device = worker.ready is not None and worker.ready.provider != "cpu"
        return [
            LoadedModel(
                name=self.name,
                size=size,
                size_vram=size if on_device else 0,
                expires_at=self.residency.expires_at,
                context_length=self.files.configured_context(),
                details=self.details(self.name),
                engine=self.engine(),
            )
        ]

    def engine(self) -> Engine | None:
        """What runs the loaded model's generations, and why when it is the Generator;
        None when no worker runs."""
        worker = self.slot.worker
        if worker is None or not worker.alive or worker.ready is None:
            return None
        return Engine(worker.ready.engine, worker.ready.engine_reason)

    async def list_models(self) -> list[str]:
        return []

    async def ready(self) -> tuple[bool, str]:
        """For ``/health/ready``: loaded, or loadable from disk, or buildable on first use."""
        if self.worker_pid is not None:
            engine = self.engine()
            return True, "loaded" if engine is None else f"loaded; {engine_text(engine)}"
        missing = self.files.missing_build()
        if missing:
            return False, missing
        model_dir = self.files.folder()
        if is_prepared(model_dir) or (model_dir / "genai_config.json").is_file():
            return True, f"not loaded; loads from {model_dir} on first use"
        if self.files.default_build(model_dir) is not None and self.settings.prepare and not missing_build_tools():
            return True, "not built yet; the default model is built on first use"
        return False, f"{model_dir} holds no model; run: dragoman models prepare smollm2"

    # -- lifetime ----------------------------------------------------------------------

    async def load(self, model: str, keep_alive: float | None) -> None:
        self.residency.check_open()
        await self.slot.ensure()
        self.residency.loaded(keep_alive)

    async def pull(self, model: str, progress: ProgressCallback) -> None:
        """``/api/pull``: build the model when it is the default one and not built yet
        (stage by stage in ``progress``); a folder that holds no model is an error."""
        model_dir = await self.slot.build(progress)
        self.files.forget()
        progress(PullProgress(status=f"{model} is ready in {model_dir}"))

    async def unload(self, model: str | None = None) -> None:
        """Once the requests in flight are done (new ones are refused meanwhile)."""
        if self._embedder is not None:
            await self._embedder.unload()
        await self.residency.unload()

    async def aclose(self) -> None:
        self.residency.forget()
        if self._embedder is not None:
            await self._embedder.close()
        await self.slot.stop()

    @property
    def worker_pid(self) -> int | None:
        return self.slot.pid

    # -- chat --------------------------------------------------------------------------

    def complete(self, request: CompletionRequest) -> AsyncIterator[Event]:
        return self._run(request)

    def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        return self._run(request)

    async def _run(self, request: Request) -> AsyncIterator[Event]:
        began = time.perf_counter_ns()
        async with self.residency.request(request.keep_alive), self.admission.slot(self.name):
            load_ns = await self.slot.ensure()
            # Closed explicitly: a client leaving must cancel the generation now,
            # not whenever the garbage collector finalizes the inner generator.
            async with contextlib.aclosing(self._generate(request, began, load_ns)) as events:
                async for event in events:
                    yield event

    async def _generate(self, request: Request, began: int, load_ns: int) -> AsyncGenerator[Event, None]:
        worker = self.slot.worker
        assert worker is not None and worker.ready is not None
        start, parser = self._plan(request, next(self._ids), worker.ready.context_length)
        memory = isinstance(request, CompletionRequest) and (request.context or request.return_context)
        tokenizer = await self._prompt_tokenizer("read or give back context", "context") if memory else None
        if tokenizer is not None and isinstance(request, CompletionRequest) and request.context:
            start = await asyncio.to_thread(with_memory, start, request.context, tokenizer)
        reply: list[str] = []  # the raw text, for the context a completion gives back
        try:
            worker.send(start)
        except FrameTooLarge as exc:
            raise RequestError(f"the request is too large for the model worker: {exc}", status=413) from None
        reports: asyncio.Queue[Report | WorkerGone] = worker.listen(start.request_id)
        consumed = credited = 0  # tokens the consumer has taken; the last credit sent
        finished = False
        logprobs = LogprobsPairing()
        try:
            first = await reports.get()
            if not isinstance(first, Started):
                finished = True  # refused or failed: nothing runs that needs cancelling
                self._raise_refusal(first, request)
            self.counters["started"] += 1
            yield RoleStart(prompt_tokens=first.prompt_tokens)
            while True:
                report = await reports.get()
                if isinstance(report, Progress):
                    yield PromptProgress(report.total, report.cached, report.processed, report.elapsed_ns // 1_000_000)
                elif isinstance(report, Tokens):
                    consumed += len(report.token_ids)
                    if consumed - credited >= RUN_AHEAD // 4:
                        worker.send(Credit(start.request_id, consumed))
                        credited = consumed
                    if tokenizer is not None:
                        reply.append(report.text)
                    for event in logprobs.pair(parser.feed(report.text), report.logprobs if request.logprobs else None):
                        yield event
                elif isinstance(report, Done):
                    finished = True
                    for event in [*logprobs.pair([*parser.feed(report.text), *parser.finish()], None), *logprobs.flush()]:
                        yield event
                    finish = self._finish(report, parser, began, load_ns, request)
                    if tokenizer is not None and isinstance(request, CompletionRequest) and request.return_context:
                        reply.append(report.text)
                        ids = await asyncio.to_thread(context_ids, tokenizer, start.prompt, "".join(reply))
                        finish = msgspec.structs.replace(finish, context=ids)
                    yield finish
                    self.counters["finished"] += 1
                    return
                else:
                    finished = True
                    self.counters["failed"] += 1
                    yield _error_event(report)
                    return
        finally:
            worker.forget(start.request_id)
            if not finished and self.slot.cancel(worker, start.request_id, consumed, reports):
                self.counters["cancelled"] += 1

    async def count_tokens(self, request: ChatRequest) -> int:
        """The prompt's length in the model's own tokens: rendered as a generation
        renders it, tokenised by the worker's own prompt tokenizer (``tokenizer.json``
        through ``tokenizers``, which lets go of the GIL), rendered and tokenised on a thread: counting
        needs no loaded model and is not bounded by the context."""
        counter = await self._prompt_tokenizer("count tokens", "model")
        # Rendering a long conversation's template is CPU work too: on the thread as well.
        return len(await asyncio.to_thread(lambda: counter.encode(chat_prompt(self.files, self.settings, request))))

    async def _prompt_tokenizer(self, use: str, param: str) -> PromptTokenizer:
        """The worker's prompt tokenizer, read once on a thread (counting, Ollama's context)."""
        await self.files.ensure()
        if self._counter is None:
            counter = await asyncio.to_thread(PromptTokenizer, self.files.folder(), None)
            if not counter.linear:
                raise UnsupportedFeature(
                    f"model '{self.name}' cannot {use}: its folder has no tokenizer.json that tokenizers reads",
                    param=param,
                )
            self._counter = counter
        return self._counter

    def _plan(self, request: Request, request_id: int, model_context: int) -> tuple[Start, OutputParser]:
        if isinstance(request, ChatRequest):
            return chat_start(self.files, self.settings, request, request_id, model_context)
        if request.templated:  # the chat it means, its reply still a completion's
            return chat_start(self.files, self.settings, request.as_chat(), request_id, model_context)
        return completion_start(self.files, request, request_id, model_context)

    def _raise_refusal(self, first: Report | WorkerGone, request: Request) -> NoReturn:
        if isinstance(first, Refused):
            if first.kind == "context":
                raise ContextTooLong(
                    first.message,
                    param="messages" if isinstance(request, ChatRequest) else "prompt",
                    prompt_tokens=first.prompt_tokens,
                    context_length=first.context_length,
                )
            if first.kind == "empty":
                raise RequestError(first.message, param="messages" if isinstance(request, ChatRequest) else "prompt")
            forced = isinstance(request, ChatRequest) and request.tool_choice.mode in ("required", "function")
            param = "tool_choice" if forced else "response_format"
            raise RequestError(first.message, param=param)
        if isinstance(first, Failed):
            raise BackendError(first.message, status=first.status if first.status != 500 else None)
        if isinstance(first, WorkerGone):
            raise BackendError(first.message)
        raise BackendError(f"the model worker answered {type(first).__name__} to a new request")

    def _finish(self, done: Done, parser: OutputParser, began: int, load_ns: int, request: Request) -> Finish:
        reason = "tool_calls" if parser.calls and done.reason == "stop" else done.reason
        stop = done.stop_sequence if done.stop_sequence in (request.options.stop or ()) else None  # not ours
        self.counters["cached_tokens"] += done.cached_tokens
        return Finish(
            reason=reason,  # type: ignore[arg-type]
            stop_sequence=stop,
            usage=Usage(prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens, cached_tokens=done.cached_tokens),
            timings=Timings(
                total_ns=time.perf_counter_ns() - began,
                load_ns=load_ns,
                prompt_eval_ns=done.prompt_eval_ns,
                eval_ns=done.eval_ns,
            ),
        )

    def _forget_counter(self) -> None:
        self._counter = None  # a new worker may follow a rebuild


def _error_event(report: Report | WorkerGone) -> ErrorEvent:
    if isinstance(report, WorkerGone):
        return ErrorEvent(report.message, status=502)
    if isinstance(report, Failed):
        return ErrorEvent(report.message, status=report.status)
    return ErrorEvent(f"unexpected report from the model worker: {type(report).__name__}", status=502)
