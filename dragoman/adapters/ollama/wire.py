"""Ollama's native ``/api/chat`` wire shapes, spelled as the seed spec and Ollama spell them.

Request Structs are Litestar's ``data:`` types: decoding checks types and the ranges the
spec states, so a wrong type is a 400 (Ollama answers 500). Unknown fields are ignored,
as real clients send extras. Values that types cannot check (``think`` strings, the
``format`` string, ``keep_alive`` strings, image base64) are checked by ``convert``.

All request Structs use ``omit_defaults`` so that :func:`convert.to_upstream` writes
only what was set; response Structs use it so optional fields are absent, never null.
Request Structs derive from :class:`GoRequest`: JSON ``null`` is the field left out.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import NODEFAULT, Meta

from dragoman.adapters.canonical import Timings, Usage

UnitInterval = Annotated[float, Meta(ge=0.0, le=1.0)]
# JSON integers are unbounded; Ollama (Go) and our backends take 64 bits.
Int64 = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
# Bodies are decoded strictly (dragoman/proxy/strict_body.py), but Ollama reads ``options`` as a
# map of JSON numbers and takes one with no fraction for an integer option, and Home
# Assistant sends such floats (``num_ctx: 8192.0``: its number selector yields floats).
# ModelOptions makes them ints; a fraction is refused (Ollama would drop it).
OptionInt = Int64 | Annotated[float, Meta(ge=-(2.0**63), lt=2.0**63)]
Count = Annotated[int, Meta(ge=0, le=2**63 - 1)] | Annotated[float, Meta(ge=0, lt=2.0**63)]

# -- request ---------------------------------------------------------------------------


class GoRequest(msgspec.Struct):
    """A request read as Ollama's Go server reads it: ``encoding/json`` decodes ``null``
    into a field's zero value or a nil pointer, and Ollama treats both as the field left
    out (``stream: null`` streams, ``format: null`` is no format). So an optional field
    is typed ``T | None`` and ``null`` becomes its default here; a required field
    (``model``, ``role``, ``name``) still refuses ``null``, naming itself."""

    def __post_init__(self) -> None:
        for name, default in _null_defaults(type(self)):
            if getattr(self, name) is None:
                setattr(self, name, default())


_NULL_DEFAULTS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _null_defaults(cls: type) -> tuple[tuple[str, Any], ...]:
    """``(field, make_default)`` for the fields of ``cls`` whose default is not None."""
    found = _NULL_DEFAULTS.get(cls)
    if found is None:
        found = tuple(
            (f.name, f.default_factory if f.default is NODEFAULT else (lambda value=f.default: value))
            for f in msgspec.structs.fields(cls)
            if f.default is not None and (f.default is not NODEFAULT or f.default_factory is not NODEFAULT)
        )
        _NULL_DEFAULTS[cls] = found
    return found


class ToolCallFunction(GoRequest, kw_only=True):
    index: int | None = 0
    name: str
    # An object on Ollama's wire; a JSON string (OpenAI's habit) is accepted too.
    arguments: dict[str, Any] | str | None = msgspec.field(default_factory=dict)


class ToolCall(GoRequest, omit_defaults=True, kw_only=True):
    id: str | None = None
    function: ToolCallFunction


class ToolDefinitionFunction(GoRequest, omit_defaults=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDefinition(GoRequest, kw_only=True):
    type: str | None = "function"
    function: ToolDefinitionFunction


class FunctionName(GoRequest):
    name: str


class NamedToolChoice(GoRequest):
    function: FunctionName
    type: str | None = "function"


class ChatMessage(GoRequest, omit_defaults=True):
    # A plain string: Ollama lower-cases roles, and convert names the bad one.
    role: str
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class ModelOptions(msgspec.Struct, omit_defaults=True):
    """The seed spec's options plus the two penalties Ollama also takes. Every option
    defaults to None, so ``null`` is already "not set" (Ollama skips a nil option)."""

    seed: OptionInt | None = None
    temperature: Annotated[float, Meta(ge=0.0, le=2.0)] | None = None
    top_k: Count | None = None
    top_p: UnitInterval | None = None
    min_p: UnitInterval | None = None
    # A single string is accepted as a list of one.
    stop: list[str] | str | None = None
    num_ctx: OptionInt | None = None
    num_predict: OptionInt | None = None
    repeat_penalty: float | None = None
    repeat_last_n: OptionInt | None = None
    tfs_z: float | None = None
    mirostat: OptionInt | None = None  # 0, 1 or 2
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    def __post_init__(self) -> None:
        # Raised at `$.options`: the messages name the option itself.
        for name in _INTEGER_OPTIONS:
            value = getattr(self, name)
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError(f"options.{name}: Expected `int`, got a fraction ({value})")
                setattr(self, name, int(value))
        if self.mirostat not in (None, 0, 1, 2):
            raise ValueError(f"options.mirostat: Expected `0, 1 or 2`, got `{self.mirostat}`")


_INTEGER_OPTIONS = ("seed", "top_k", "num_ctx", "num_predict", "repeat_last_n", "mirostat")


class ChatRequest(GoRequest, omit_defaults=True):
    model: str
    # Empty (or absent, as Go reads it) means "load the model".
    messages: list[ChatMessage] | None = msgspec.field(default_factory=list)
    tools: list[ToolDefinition] | None = None
    # "json" or a JSON Schema object; any other string is refused by convert.
    format: str | dict[str, Any] | None = None
    stream: bool | None = True
    # true / false / "low" / "medium" / "high"; strings are checked by convert.
    think: bool | str | None = None
    # Seconds as a number, or a Go duration string such as "5m".
    keep_alive: float | str | None = None
    options: ModelOptions | None = None
    logprobs: bool | None = False
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = 0
    # Extension (Ollama has no tool_choice): OpenAI's spelling. A dragoman upstream
    # honours it; Ollama ignores it, which dragoman's ollama backend checks for.
    tool_choice: str | NamedToolChoice | None = None


class GenerateRequest(GoRequest, omit_defaults=True):
    """``POST /api/generate`` as Ollama's ``api.GenerateRequest``."""

    model: str
    # Empty means "load the model" (with keep_alive 0: unload it).
    prompt: str | None = ""
    suffix: str | None = ""  # "" is no suffix, as in Go
    system: str | None = ""
    # Go templates are not rendered: convert refuses a non-empty one, naming it.
    template: str | None = ""
    # Token memory of an earlier reply (deprecated by Ollama, still served): the ids
    # prepend the prompt. Bounded by the body's size here, by the model's context there.
    context: list[int] | None = None
    stream: bool | None = True
    raw: bool | None = False
    format: str | dict[str, Any] | None = None
    keep_alive: float | str | None = None
    images: list[str] | None = None
    options: ModelOptions | None = None
    think: bool | str | None = None
    logprobs: bool | None = False
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = 0


# -- response --------------------------------------------------------------------------


class TokenLogprob(msgspec.Struct, omit_defaults=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class Logprob(msgspec.Struct, omit_defaults=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TokenLogprob] | None = None


class Counts(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The counts and durations (nanoseconds) Ollama sets on a reply's final object and
    leaves out of the others: written by the reply Structs, read from upstream ones.
    Keyword-only, so msgspec places them after a subclass's own fields, where Ollama
    writes them."""

    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None

    def usage(self) -> Usage:
        return Usage(prompt_tokens=self.prompt_eval_count or 0, completion_tokens=self.eval_count or 0)

    def timings(self) -> Timings:
        return Timings(
            total_ns=self.total_duration or 0,
            load_ns=self.load_duration or 0,
            prompt_eval_ns=self.prompt_eval_duration or 0,
            eval_ns=self.eval_duration or 0,
        )


CountsT = TypeVar("CountsT", bound=Counts)


def with_counts(reply: CountsT, usage: Usage, timings: Timings) -> CountsT:
    """``reply`` as a final object, carrying ``usage`` and ``timings``."""
    return msgspec.structs.replace(
        reply,
        total_duration=timings.total_ns,
        load_duration=timings.load_ns,
        prompt_eval_count=usage.prompt_tokens,
        prompt_eval_duration=timings.prompt_eval_ns,
        eval_count=usage.completion_tokens,
        eval_duration=timings.eval_ns,
    )


class ResponseMessage(msgspec.Struct, omit_defaults=True):
    """``message`` of a reply: ``content`` is always present, even when empty."""

    role: str
    content: str
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatResponse(Counts, omit_defaults=True):
    """One NDJSON line, or the whole non-streaming reply. Counts and durations are set
    only on the final (``done: true``) object."""

    model: str
    created_at: str
    message: ResponseMessage
    done: bool
    done_reason: str | None = None
    logprobs: list[Logprob] | None = None


class GenerateResponse(Counts, omit_defaults=True):
    """One ``/api/generate`` NDJSON line, or the whole reply: ``response`` is always
    present; counts and durations only on the final (``done: true``) object."""

    model: str
    created_at: str
    response: str
    done: bool
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None
    done_reason: str | None = None
    logprobs: list[Logprob] | None = None
    # On the final line of a templated generate: the ids of the prompt and the reply
    # (before the counts, where Ollama writes it).
    context: list[int] | None = None


class ErrorResponse(msgspec.Struct):
    error: str


class UpstreamChatResponse(Counts):
    """A line (or whole reply) from an upstream Ollama server, read leniently: every
    field may be missing, and an ``error`` line has nothing else."""

    model: str = ""
    message: ChatMessage | None = None
    done: bool = False
    done_reason: str | None = None
    logprobs: list[Logprob] | None = None
    error: str | None = None
    status: int | None = None
    context: list[int] | None = None  # /api/generate's, read through UpstreamGenerateDecoder


class UpstreamGenerateResponse(Counts):
    """A line (or whole reply) of an upstream Ollama server's ``/api/generate``, read
    as leniently as :class:`UpstreamChatResponse`."""

    model: str = ""
    response: str = ""
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None
    done: bool = False
    done_reason: str | None = None
    logprobs: list[Logprob] | None = None
    error: str | None = None
    status: int | None = None
    context: list[int] | None = None


# -- discovery -------------------------------------------------------------------------


class TagDetails(msgspec.Struct):
    """``details`` of a model in ``/api/tags``, ``/api/show`` and ``/api/ps``: what
    dragoman writes, and what it reads from upstream Ollama servers."""

    format: str = ""
    family: str = ""
    families: list[str] | None = None
    parameter_size: str = ""
    quantization_level: str = ""
    parent_model: str = ""
