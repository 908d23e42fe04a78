"""The dialect-neutral requests and the one stream of events every backend yields.

Adapters translate each dialect's wire shapes to and from these types; backends
consume a :class:`ChatRequest` (a conversation) or a :class:`CompletionRequest` (a
prompt to continue) and yield :data:`Event` values. A non-streaming reply
is the aggregate of the same events (see :mod:`adapters.aggregate`), so there is one
path, not two.

Unset sampling fields are ``None`` on purpose: "the client did not say" must stay
distinguishable from any value, so a model's configured defaults can fill the gaps.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

Role = Literal["system", "user", "assistant", "tool"]
"""The roles every adapter knows; a :class:`Message` may carry others (see there)."""
ThinkLevel = Literal["low", "medium", "high"]
FinishReason = Literal["stop", "length", "tool_calls", "load", "unload"]


# -- request ---------------------------------------------------------------------------


class Secret(str):
    """A string that never shows itself in a repr, so it cannot leak into logs."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Secret('***')"


class TextPart(msgspec.Struct, tag="text", frozen=True):
    text: str


class ImagePart(msgspec.Struct, tag="image", frozen=True):
    """Image bytes already decoded from base64; ``mime_type`` sniffed or declared."""

    data: bytes
    mime_type: str = "application/octet-stream"


Part = Union[TextPart, ImagePart]


class ToolCall(msgspec.Struct):
    """A whole tool call. Arguments are an object (key order kept), never a JSON string."""

    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None
    index: int = 0


class Message(msgspec.Struct):
    # One of :data:`Role`, or any other string an Ollama client sent: Ollama leaves
    # roles to the model's template, so a template that knows "ipython" or "critic"
    # gets it, and one that cannot render it refuses it by name.
    role: str
    parts: list[Part] = msgspec.field(default_factory=list)
    thinking: str | None = None
    # The opaque signature that closed ``thinking`` when it was generated (Anthropic
    # hands it back and verifies it); kept so a same-dialect upstream gets it back.
    thinking_signature: str | None = None
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    # For role "tool": which call this answers and that call's function name.
    tool_call_id: str | None = None
    tool_name: str | None = None
    name: str | None = None

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> list[ImagePart]:
        return [p for p in self.parts if isinstance(p, ImagePart)]


class Tool(msgspec.Struct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolChoice(msgspec.Struct, frozen=True):
    """``auto`` (default), ``none`` (no calls), ``required`` (at least one call) or
    ``function`` (exactly the function called ``name``)."""

    mode: Literal["auto", "none", "required", "function"] = "auto"
    name: str | None = None


class ResponseFormat(msgspec.Struct, frozen=True):
    """``text`` (no constraint), ``json`` (any JSON object) or ``json_schema``."""

    type: Literal["text", "json", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None


class SamplingOptions(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, frozen=True):
    """Every sampling knob of Ollama's ``ModelOptions`` plus OpenAI's penalties.

    ``None`` means "not given": :func:`SamplingOptions.merged` fills it from defaults.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    tfs_z: float | None = None
    mirostat: Literal[0, 1, 2] | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    seed: int | None = None
    num_predict: int | None = None
    num_ctx: int | None = None
    stop: list[str] | None = None

    def merged(self, defaults: SamplingOptions | None) -> SamplingOptions:
        """These options with every unset field taken from ``defaults``."""
        if defaults is None:
            return self
        changes = {
            field: getattr(defaults, field)
            for field in self.__struct_fields__
            if getattr(self, field) is None and getattr(defaults, field) is not None
        }
        return msgspec.structs.replace(self, **changes) if changes else self


class RequestBase(msgspec.Struct, kw_only=True):
    """What every request for generated text carries beside its input."""

    options: SamplingOptions = SamplingOptions()
    response_format: ResponseFormat = ResponseFormat()
    # None: the model's own default. False: off. True: on at the model's default depth.
    think: bool | None = None
    think_level: ThinkLevel | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    # Token id → bias added to its logit before sampling (OpenAI's ``logit_bias``).
    logit_bias: dict[int, float] | None = None
    # Ask for PromptProgress events while the prompt is read (llama-server's
    # return_progress); only backends whose capabilities say prompt_progress send them.
    return_progress: bool = False
    # False: at most one tool call per reply (OpenAI ``parallel_tool_calls: false``,
    # Anthropic ``disable_parallel_tool_use``). None: the backend's default (allowed).
    parallel_tool_calls: bool | None = None
    stream: bool = False
    # Seconds; None = the model's configured default, 0 = unload after this request,
    # negative = keep loaded forever.
    keep_alive: float | None = None
    # The client's Authorization header, for upstreams configured to forward it.
    authorization: Secret | None = None
    # What the client says its requests share a prompt cache by (OpenAI's
    # ``prompt_cache_key``, else ``user``): upstream fleets route on it before the prefix.
    cache_key: str | None = None


class ChatRequest(RequestBase):
    model: str
    messages: list[Message]
    tools: list[Tool] = msgspec.field(default_factory=list)
    tool_choice: ToolChoice = ToolChoice()


class CompletionRequest(RequestBase):
    """A prompt to continue (``/api/generate``, ``/v1/completions``), not a conversation.

    Three kinds, which backends and bridges treat differently:

    - *templated* (not ``raw``, no ``suffix``): semantically a chat of ``[system, user]``
      rendered with the model's template — :meth:`as_chat` is that chat;
    - *raw*: ``prompt`` is the model's whole input, special tokens kept special
      (api-mapping §7), e.g. a hand-rendered template;
    - *fill-in-the-middle* (``suffix`` set): the model writes what goes between
      ``prompt`` and ``suffix``, framed by its own FIM tokens; both texts are data
      whatever ``raw`` says (Ollama would drop a suffix in raw mode, which Continue's
      ``raw: true`` autocomplete does not mean).
    """

    model: str
    prompt: str
    suffix: str | None = None
    raw: bool = False
    system: str | None = None
    images: list[ImagePart] = msgspec.field(default_factory=list)
    # Ollama's token memory: the ids an earlier reply's ``context`` gave back, which
    # prepend the rendered prompt (not in raw mode, as Ollama). ``return_context``:
    # the reply's Finish carries the ids of this prompt and reply, for the next turn.
    context: list[int] | None = None
    return_context: bool = False

    @property
    def templated(self) -> bool:
        return not self.raw and self.suffix is None

    def as_chat(self) -> ChatRequest:
        """The chat a templated prompt means: the system text, then one user turn."""
        messages = [Message(role="system", parts=[TextPart(self.system)])] if self.system else []
        messages.append(Message(role="user", parts=[*self.images, TextPart(self.prompt)]))
        fields = {f: getattr(self, f) for f in RequestBase.__struct_fields__}
        return ChatRequest(model=self.model, messages=messages, **fields)


Request = Union[ChatRequest, CompletionRequest]


# -- events ----------------------------------------------------------------------------


class Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of ``prompt_tokens`` (counted in them, as OpenAI counts ``cached_tokens``), those
    # whose state came from a prompt cache rather than being computed again; None where
    # the backend cannot tell, so that renderers claim nothing they do not know.
    cached_tokens: int | None = None
    # Of ``prompt_tokens`` too, those written to a prompt cache for later requests
    # (Anthropic's ``cache_creation_input_tokens``, billed apart from the rest); None
    # where the backend does not say. Only upstreams report them: local prefix reuse
    # is automatic and costs nothing more.
    cache_write_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        """Usage summed over several replies (one completion request with many prompts)."""
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            _known_sum(self.cached_tokens, other.cached_tokens),
            _known_sum(self.cache_write_tokens, other.cache_write_tokens),
        )


def _known_sum(a: int | None, b: int | None) -> int | None:
    """What is known, summed; None when neither side knows."""
    return None if a is None and b is None else (a or 0) + (b or 0)


class Timings(msgspec.Struct, frozen=True):
    """Nanoseconds, as Ollama reports them."""

    total_ns: int = 0
    load_ns: int = 0
    prompt_eval_ns: int = 0
    eval_ns: int = 0


class TopLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = []


class RoleStart(msgspec.Struct, tag="role", frozen=True):
    """Opens a reply; OpenAI's first chunk carries it. ``prompt_tokens``: the whole
    prompt's length, when the backend knows it before the reply (Anthropic's
    ``message_start`` reports it; ``Finish.usage`` still carries the counts at the end)."""

    role: Role = "assistant"
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # of prompt_tokens, as in Usage
    cache_write_tokens: int | None = None  # of prompt_tokens, as in Usage


class PromptProgress(msgspec.Struct, tag="prompt_progress", frozen=True):
    """How far the prompt has been read, for a request that asked (``return_progress``):
    ``processed`` of ``total`` tokens, ``cached`` of them from a prefix cache."""

    total: int
    cached: int
    processed: int
    elapsed_ms: int


class ContentDelta(msgspec.Struct, tag="content", frozen=True):
    """Reply text. ``logprobs`` are those of the tokens the text came from, so that
    encoders put them on the same chunk as the text, as OpenAI and Ollama do."""

    text: str
    logprobs: list[TokenLogprob] | None = None


class ThinkingDelta(msgspec.Struct, tag="thinking", frozen=True):
    """A piece of the reply's thinking. ``signature`` (with empty ``text``) closes the
    thinking with an opaque signature, as Anthropic upstreams send one; dialects that
    have no signature ignore it."""

    text: str
    signature: str | None = None


class ToolCallDone(msgspec.Struct, tag="tool_call", frozen=True):
    """A complete call, as local backends emit them as soon as their parser closes one."""

    call: ToolCall


class ToolCallFragment(msgspec.Struct, tag="tool_call_fragment", frozen=True):
    """A piece of a call as OpenAI-style upstreams stream them: the first fragment of an
    ``index`` carries ``id`` and ``name``; ``arguments`` pieces concatenate to JSON."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


class Logprobs(msgspec.Struct, tag="logprobs", frozen=True):
    """Logprobs of tokens that produced no reply text of their own (thinking, a tool
    call, text still held back at the end); those of text ride on its ContentDelta."""

    tokens: list[TokenLogprob]


class Finish(msgspec.Struct, tag="finish", frozen=True):
    reason: FinishReason = "stop"
    usage: Usage = Usage()
    timings: Timings = Timings()
    # Which of the request's stop sequences ended the reply (reason "stop"), when the
    # backend knows; Anthropic reports it as ``stop_sequence``.
    stop_sequence: str | None = None
    # The token ids of the prompt and the reply, for a completion that asked for them
    # (``CompletionRequest.return_context``; Ollama's ``context``).
    context: list[int] | None = None


class ErrorEvent(msgspec.Struct, tag="error", frozen=True):
    """A failure after the backend started. ``status`` is what the client would have
    got had nothing been streamed yet."""

    message: str
    status: int = 500
    retry_after: float | None = None


Event = Union[
    RoleStart,
    PromptProgress,
    ContentDelta,
    ThinkingDelta,
    ToolCallDone,
    ToolCallFragment,
    Logprobs,
    Finish,
    ErrorEvent,
]


# -- embeddings --------------------------------------------------------------------------

EmbedInput = Union[str, list[int]]
"""One input: text, or token ids of the serving model's own vocabulary (used as given)."""


class EmbedRequest(msgspec.Struct):
    """Vectors for ``inputs``, each dialect's promises made explicit.

    ``truncate``: cut an input longer than the context to fit (Ollama's default), or
    refuse it (OpenAI's). ``normalize``: L2-normalise the vectors (``/api/embed`` and
    ``/v1/embeddings`` promise unit length; Ollama's legacy ``/api/embeddings`` returns
    the model's own output). ``dimensions``: keep the first N components (then
    renormalise when ``normalize``), as Matryoshka-trained models allow.
    """

    model: str
    inputs: list[EmbedInput]
    truncate: bool = True
    normalize: bool = True
    dimensions: int | None = None
    num_ctx: int | None = None
    keep_alive: float | None = None
    authorization: Secret | None = None
    # The gateway's bound on the tokens of all inputs together; a backend that
    # tokenizes refuses more before running the model.
    max_tokens: int | None = None


class EmbedResult(msgspec.Struct):
    """``vectors`` is a float32 numpy array of shape (inputs, dimensions): one copy from
    the model to the wire, and base64 is its bytes. ``prompt_tokens`` counts every
    token the model read, after truncation."""

    vectors: Any
    prompt_tokens: int = 0
    timings: Timings = Timings()
