"""What the backend and its worker process say to each other over stdin/stdout.

Each frame is a 4-byte big-endian length followed by one msgpack-encoded message.
Commands go parent → worker, reports go worker → parent; every message is a tagged
``msgspec`` Struct so both sides decode into types, not dicts.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Literal, Union

import msgspec

from dragoman.adapters.canonical import TokenLogprob
from dragoman.backends.text.segments import Segment

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024
# Tokens a generation may run ahead of what its consumer has taken (see Credit): a
# slow or stalled reader pauses its generation instead of filling pipes and queues.
RUN_AHEAD = 32
# The ``spin`` setting (WorkerConfig.spin): always, never, or while the cores are quiet.
SpinChoice = bool | Literal["auto"]


class FrameTooLarge(ValueError):
    """A message that would not fit one frame; refused before it is sent."""


class WorkerConfig(msgspec.Struct, frozen=True):
    """The worker's command-line argument (JSON): what to load and how."""

    model_path: str
    providers: list[str]  # candidates, tried in order
    provider_options: dict[str, str] = {}
    threads: int | None = None
    spin: SpinChoice = "auto"  # the batch engine's intra-op threads spin within a pass (auto: when the cores are quiet)
    grammar_timeout: float = 5.0  # seconds one grammar may take to compile
    grammar_memory: int = 512 * 1024 * 1024  # bytes it may take (POSIX: enforced)
    # How generations run: "batch" (the batch engine, CPU), "generator" (the library's
    # Generator, one per request), "auto" (batch where the model and provider allow).
    engine: Literal["auto", "batch", "generator"] = "auto"
    prefix_cache_bytes: int = 256 * 1024 * 1024  # KV of recent prompts (batch engine) or Generators (generator_cache) kept for reuse
    prefix_cache_entries: int = 16


# -- commands --------------------------------------------------------------------------


class Search(msgspec.Struct, omit_defaults=True, frozen=True):
    """Options the library samples with (``GeneratorParams.set_search_options``); None
    leaves the model's ``genai_config.json`` default."""

    do_sample: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    random_seed: int | None = None


class Processing(msgspec.Struct, omit_defaults=True, frozen=True):
    """Sampling knobs the library lacks, applied to the logits in numpy. None = off."""

    min_p: float | None = None
    repeat_penalty: float | None = None  # only with repeat_last_n, else the library's
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    tfs_z: float | None = None
    mirostat: Literal[0, 1, 2] = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    temperature: float = 1.0
    seed: int | None = None
    logit_bias: dict[int, float] | None = None  # token id → added to its logit, first


class Guidance(msgspec.Struct, frozen=True):
    kind: Literal["json_schema", "regex", "lark_grammar"]
    data: str


class Start(msgspec.Struct, tag="start", frozen=True):
    request_id: int
    # The prompt as segments: special ones tokenise special-token texts as those
    # tokens (template text, raw prompts), plain ones as ordinary text (client text).
    prompt: list[Segment]
    context_length: int
    max_new_tokens: int | None = None  # None: up to the context length
    search: Search = Search()
    processing: Processing = Processing()
    guidance: Guidance | None = None
    stop: list[str] = []
    logprobs: bool = False
    top_logprobs: int = 0
    # Keep special tokens in the text (parsers need markers that are special tokens).
    special_tokens: bool = False
    # Report how far the prompt has been read, after each prefill chunk.
    progress: bool = False


class Cancel(msgspec.Struct, tag="cancel", frozen=True):
    request_id: int


class Credit(msgspec.Struct, tag="credit", frozen=True):
    """The consumer has taken ``consumed`` tokens of the request in all: the worker
    generates at most :data:`RUN_AHEAD` beyond that."""

    request_id: int
    consumed: int


class Ping(msgspec.Struct, tag="ping", frozen=True):
    """Answered with :class:`Pong` from the worker's step loop: proof that it runs."""

    seq: int


class Shutdown(msgspec.Struct, tag="shutdown", frozen=True):
    pass


Command = Union[Start, Cancel, Credit, Ping, Shutdown]


# -- reports ---------------------------------------------------------------------------


class Ready(msgspec.Struct, tag="ready", frozen=True):
    provider: str  # what the model runs on: cpu, cuda, dml
    device_type: str
    context_length: int
    load_ns: int
    eos_token_ids: list[int] = []
    engine: Literal["batch", "generator"] = "generator"  # what runs the generations
    # Why the Generator runs them where the batch engine does not ("" for the batch
    # engine): the batch engine's refusal, the config's choice, or the provider.
    engine_reason: str = ""


class LoadFailed(msgspec.Struct, tag="load_failed", frozen=True):
    message: str


class Started(msgspec.Struct, tag="started", frozen=True):
    """The prompt fits and generation begins (prefill follows)."""

    request_id: int
    prompt_tokens: int
    max_length: int


class Refused(msgspec.Struct, tag="refused", frozen=True):
    """The request cannot start; ``kind`` picks the error the parent raises."""

    request_id: int
    kind: Literal["context", "invalid", "too_complex", "empty"]
    message: str
    prompt_tokens: int = 0
    context_length: int = 0


class Progress(msgspec.Struct, tag="progress", frozen=True):
    """How far the prompt has been read (``Start.progress``), after a prefill chunk:
    ``processed`` of ``total`` prompt tokens, ``cached`` of them from a prefix cache."""

    request_id: int
    total: int
    cached: int
    processed: int
    elapsed_ns: int


class Tokens(msgspec.Struct, tag="tokens", frozen=True):
    request_id: int
    token_ids: list[int]
    text: str  # decoded delta, stop-string tail held back
    logprobs: list[TokenLogprob] | None = None


class Done(msgspec.Struct, tag="done", frozen=True):
    request_id: int
    reason: Literal["stop", "length", "cancelled"]
    prompt_tokens: int
    completion_tokens: int
    prompt_eval_ns: int = 0
    eval_ns: int = 0
    text: str = ""  # the held-back tail, released at the end
    stop_sequence: str | None = None  # the stop string that ended it, if one did
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache


class Failed(msgspec.Struct, tag="failed", frozen=True):
    """One request broke in the worker (the worker itself carries on); ``status`` is
    the HTTP status it means (400: the request's own constraint failed)."""

    request_id: int
    message: str
    status: int = 500


class Pong(msgspec.Struct, tag="pong", frozen=True):
    seq: int
    request_id: int = -1  # never a request's: routed to nobody


Report = Union[Ready, LoadFailed, Started, Refused, Progress, Tokens, Done, Failed, Pong]

_command_decoder = msgspec.msgpack.Decoder(Command)
_report_decoder = msgspec.msgpack.Decoder(Report)
_encoder = msgspec.msgpack.Encoder()


def encode_frame(message: Command | Report) -> bytes:
    """The frame for ``message``; :class:`FrameTooLarge` past :data:`MAX_FRAME`, so
    an oversized message is refused where it is made, never cut off the stream."""
    body = _encoder.encode(message)
    if len(body) > MAX_FRAME:
        raise FrameTooLarge(f"a {type(message).__name__} of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    return HEADER.pack(len(body)) + body


def decode_command(body: bytes) -> Command:
    return _command_decoder.decode(body)


def decode_report(body: bytes) -> Report:
    return _report_decoder.decode(body)


def frame_length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
    return length


def read_frame(stream: BinaryIO) -> bytes | None:
    """One frame's body from a blocking stream; None at a clean end of stream."""
    header = _read_exactly(stream, HEADER.size)
    if header is None:
        return None
    body = _read_exactly(stream, frame_length(header))
    if body is None:
        raise EOFError("stream ended inside a frame")
    return body


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            if remaining == size:
                return None
            raise EOFError("stream ended inside a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
