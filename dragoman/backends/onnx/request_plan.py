"""What a request asks of the worker: the prompt and its budget, sampling, constraint,
and the parser its output goes through. Rendered here, on the server side of the
backend, never in the worker's step loop: a chat through the model's template, a raw
completion as it is (special tokens special, api-mapping §7). A prompt too long for
the context even at the vocabulary's longest token is refused here, before the worker
tokenises anything (so a megabyte of text is never tokenised to find out).
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.canonical import ChatRequest, CompletionRequest, RequestBase
from dragoman.adapters.errors import ContextTooLong, RequestError, UnsupportedFeature
from dragoman.backends.onnx.constraint_plan import guidance_for
from dragoman.backends.onnx.model_files import ModelFiles
from dragoman.backends.onnx.worker_protocol import Guidance, Start
from dragoman.backends.onnx.sampling_plan import max_new_tokens, plan_sampling
from dragoman.backends.onnx.settings import OnnxSettings
from dragoman.backends.text.chat_template import render_chat_segments, supports_thinking
from dragoman.backends.text.fim import find_fim
from dragoman.backends.text.output_parsers import CALL_CLOSE, CALL_OPEN, THINK_OPEN, OutputParser
from dragoman.backends.text.segments import Segment, fewest_tokens, prompt_bytes, prompt_text


def chat_start(
    files: ModelFiles, settings: OnnxSettings, request: ChatRequest, request_id: int, model_context: int
) -> tuple[Start, OutputParser]:
    template = files.chat_template()
    tools_active = _tools_active(settings, request)
    thinking = settings.reasoning_parser == "think" and supports_thinking(template)
    vocabulary = files.tokenizer()
    prompt = chat_prompt(files, settings, request)
    markers = [m for m, on in ((CALL_OPEN, tools_active), (THINK_OPEN, thinking)) if on]
    start = _start(
        files,
        request,
        request_id,
        model_context,
        prompt,
        guidance_for(request, tools_active=tools_active),
        special_tokens=bool(set(markers) & vocabulary.special),
        stop=stops(request, tools_active=tools_active),
    )
    parser = OutputParser(
        tools=tools_active,
        thinking=thinking,
        start_in_thinking=thinking and prompt_text(prompt).rstrip().endswith(THINK_OPEN),
    )
    return start, parser


def chat_prompt(files: ModelFiles, settings: OnnxSettings, request: ChatRequest) -> list[Segment]:
    """The prompt a chat becomes: the model's template over the messages (and tools)."""
    return render_chat_segments(
        files.chat_template(),
        request.messages,
        request.tools if _tools_active(settings, request) else None,
        enable_thinking=request.think,
        tokens=files.template_tokens(),
        protected=files.tokenizer().added,
    )


def _tools_active(settings: OnnxSettings, request: ChatRequest) -> bool:
    return bool(request.tools) and request.tool_choice.mode != "none" and settings.tool_parser != "none"


def completion_start(
    files: ModelFiles, request: CompletionRequest, request_id: int, model_context: int
) -> tuple[Start, OutputParser]:
    """A raw completion: the prompt is the model's whole input; with a suffix, the
    model's FIM frame around the client's prefix and suffix (plain text). What the
    model writes is plain text (no thinking or tool-call parsing, as Ollama's raw mode)."""
    guidance = guidance_for(request, tools_active=False)  # type: ignore[arg-type]
    prompt = [Segment(request.prompt, special=True)]
    if request.suffix is not None:
        fim = find_fim(files.tokenizer().added)
        if fim is None:  # checked before the request starts; the files may have changed since
            raise UnsupportedFeature(f"model '{files.name}' does not support insert", param="suffix")
        prompt = fim.segments(request.prompt, request.suffix)
    start = _start(files, request, request_id, model_context, prompt, guidance, special_tokens=False)
    return start, OutputParser(tools=False, thinking=False)


def _start(
    files: ModelFiles,
    request: RequestBase,
    request_id: int,
    model_context: int,
    prompt: list[Segment],
    guidance: Guidance | None,
    *,
    special_tokens: bool,
    stop: list[str] | None = None,
) -> Start:
    options = request.options
    context = files.context_length(options.num_ctx, model_context)
    longest = files.tokenizer().longest_token_bytes
    at_least = fewest_tokens(prompt, longest)
    if at_least >= context:
        raise ContextTooLong(
            f"the prompt is {prompt_bytes(prompt)} bytes, so at least {at_least} tokens (no token of this model "
            f"spells more than {longest} bytes), which cannot fit the context length of {context} tokens; "
            "shorten it",
            param="messages" if isinstance(request, ChatRequest) else "prompt",
            prompt_tokens=at_least,
            context_length=context,
            at_least=True,
        )
    vocab_size = files.facts().vocab_size
    search, processing = plan_sampling(options, vocab_size=vocab_size)
    if request.logit_bias:
        check_bias_ids(request.logit_bias, vocab_size)
        processing = msgspec.structs.replace(processing, logit_bias=request.logit_bias)
    return Start(
        request_id=request_id,
        prompt=prompt,
        context_length=context,
        max_new_tokens=max_new_tokens(options),
        search=search,
        processing=processing,
        guidance=guidance,
        stop=list(options.stop or []) if stop is None else stop,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs if request.logprobs else 0,
        special_tokens=special_tokens,
        progress=request.return_progress,
    )


def check_bias_ids(bias: dict[int, float], vocab_size: int | None) -> None:
    """A biased id past the vocabulary is a client's mistake, named (OpenAI refuses it too)."""
    if vocab_size is None:
        return
    bad = next((token for token in bias if token >= vocab_size), None)
    if bad is not None:
        raise RequestError(
            f"logit_bias: {bad} is not a token id of this model (0 to {vocab_size - 1})", param="logit_bias"
        )


def stops(request: ChatRequest, *, tools_active: bool) -> list[str]:
    """The request's stop strings; with parallel calls off, also the end of a call, so
    generation ends right after the first one (the parser still closes it at the end)."""
    found = list(request.options.stop or [])
    if tools_active and request.parallel_tool_calls is False and CALL_CLOSE not in found:
        found.append(CALL_CLOSE)
    return found
