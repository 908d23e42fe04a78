"""The YAML config as typed structs. Strict: an unknown key is an error naming it.

A model entry mixes keys every backend shares (``ModelConfig``) with keys only its
backend knows (the backend's own ``Settings`` struct); :mod:`config.loader` splits them.
"""

from __future__ import annotations

import fnmatch

import ipaddress
import re
from typing import Annotated, Any, Literal

import msgspec

from dragoman.adapters.canonical import SamplingOptions
from dragoman.adapters.schema_budget import SchemaBudget

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434
DEFAULT_KEEP_ALIVE = 300.0  # seconds, as Ollama's 5m


MiB = 1024 * 1024

# Ollama's own CORS allow-list (envconfig.AllowedOrigins): local pages on any port,
# desktop apps (Obsidian's app://, Tauri), local files and VS Code webviews.
OLLAMA_ORIGINS = tuple(
    [f"{scheme}://{host}{port}" for host in ("localhost", "127.0.0.1", "0.0.0.0") for scheme in ("http", "https")
     for port in ("", ":*")]
    + ["app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*"]
)  # fmt: skip


class Limits(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Bounds on what one request may ask; each breach is a clear 4xx/503."""

    max_body_bytes: int = 32 * MiB
    # Seconds to receive one whole request body: a client sending a byte a second held
    # its connection (and its place among the server's) for as long as it liked.
    body_seconds: float = 60.0
    max_images: int = 16  # per request
    max_image_bytes: int = 20 * MiB  # decoded bytes of all images of one request
    # Per model: generations running at once, and requests waiting for a turn.
    # None leaves it to the backend (the ONNX backend has its own bounded queue).
    max_concurrent: int | None = None
    max_queue: int = 64
    request_timeout: float | None = None  # seconds for a whole request; None = no limit
    # Embeddings: inputs in one request (OpenAI's own limit), characters of one input,
    # and tokens of all inputs together (OpenAI's 300k), checked before any model runs.
    max_embed_inputs: int = 2048
    max_embed_input_chars: int = 100_000
    max_embed_tokens: int = 300_000
    max_prompts: int = 16  # prompts in one /v1/completions request (one choice each, run in turn)
    max_choices: int = 8  # choices (OpenAI's n) of one chat request, generated together
    # The shape of one request, checked before any work (400 naming the field). Far
    # above what real clients send: OpenAI allows 4 stop strings, model names are short.
    max_model_name: int = 256  # characters
    max_stop: int = 16  # stop strings
    max_stop_bytes: int = 256  # UTF-8 bytes of one stop string
    max_message_chars: int = 2_000_000  # characters of one message's text
    max_prompt_chars: int = 8_000_000  # characters of all messages' text together
    max_json_depth: int = 64  # nesting of free-form JSON: schemas, tool parameters and arguments
    # Messages (Responses: input items) of one request, counted before they are converted:
    # 300k tiny ones fit in the body limit and held the event loop for seconds.
    max_messages: int = 10_000
    schema: SchemaBudget = SchemaBudget()  # JSON schemas compiled into grammars

    def __post_init__(self) -> None:
        if not self.body_seconds > 0:
            raise ValueError("'body_seconds' must be positive")


class ImageFetch(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Fetching http(s) image URLs that clients send (OpenAI ``image_url``). Off by default."""

    enabled: bool = False
    allowed_hosts: list[str] = msgspec.field(default_factory=list)  # empty: any public host
    max_bytes: int = 10 * MiB  # decoded bytes of one image (counted while decompressing)
    timeout: float = 10.0  # seconds for one whole fetch: resolving, connecting, reading
    max_concurrent: int = 4  # fetches of one request at a time

    def __post_init__(self) -> None:
        if self.max_concurrent < 1 or self.max_bytes < 1 or self.timeout <= 0:
            raise ValueError("'max_concurrent' and 'max_bytes' must be at least 1 and 'timeout' positive")


class KeyPolicy(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """An entry of ``server.api_keys`` given as an object: the key, the name its usage is
    counted under (never the key itself), and its limits (none: unlimited)."""

    key: str
    name: str
    rpm: Annotated[int, msgspec.Meta(ge=1)] | None = None  # requests per minute
    tpm: Annotated[int, msgspec.Meta(ge=1)] | None = None  # prompt + generated tokens per minute
    max_concurrent: Annotated[int, msgspec.Meta(ge=1)] | None = None  # requests at once
    models: list[str] | None = None  # names or globs this key may use; None: all

    def allows(self, model: str) -> bool:
        return self.models is None or any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)


class TracingConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """OpenTelemetry traces (OTLP over HTTP). Off unless ``endpoint`` is set here or the
    standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is;
    the other ``OTEL_*`` variables (headers, sampler, batch delay) apply as the SDK reads them."""

    endpoint: str | None = None  # the collector's base URL, e.g. http://127.0.0.1:4318 (spans go to /v1/traces)
    service_name: str = "dragoman"


class ResponseStoreConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Where ``/v1/responses`` keeps what ``store: true`` stores (previous_response_id,
    GET/DELETE /v1/responses/{id}). ``kind: none`` keeps nothing."""

    kind: Literal["sqlite", "postgres", "none"] = "sqlite"
    path: str | None = None  # the SQLite file; None = $DRAGOMAN_HOME/responses.sqlite3
    url: str | None = None  # postgres: postgresql://user:password@host:5432/db (usually "${ENV_VAR}")
    max_age: float = 30 * 24 * 3600.0  # seconds a response is kept (OpenAI keeps 30 days)
    max_bytes: int = 256 * MiB  # all stored responses together; the oldest go first

    def __post_init__(self) -> None:
        if self.max_age <= 0:
            raise ValueError("'max_age' must be a positive number of seconds")
        if self.max_bytes < MiB:
            raise ValueError("'max_bytes' must be at least 1048576 (1 MiB)")
        if (self.kind == "postgres") != (self.url is not None):
            raise ValueError("'url' (postgresql://…) is needed with kind: postgres, and only there")


def listed(value: list[str] | str) -> list[str]:
    """A setting that is a list, or one string split on commas and whitespace (so that
    ``"${DRAGOMAN_HOSTS}"`` can carry several)."""
    items = value.replace(",", " ").split() if isinstance(value, str) else value
    return [item.strip() for item in items if item.strip()]


_HOST_NAME = re.compile(r"(\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")


def host_entry_problem(entry: str) -> str | None:
    """Why ``entry`` cannot be a ``server.allowed_hosts`` entry: a name, ``*.domain``, an
    IP address (an IPv6 one with or without brackets), or ``*``; never a scheme or port."""
    if entry == "*" or _HOST_NAME.fullmatch(entry):
        return None
    try:
        ipaddress.ip_address(entry.removeprefix("[").removesuffix("]"))
    except ValueError:
        return (
            f"'allowed_hosts': '{entry}' is not a host name or address; list names ('gw.lan'), "
            "'*.lan' for every name under a domain, addresses, or '*', without scheme or port"
        )
    return None


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    host: str = DEFAULT_HOST
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = DEFAULT_PORT  # 0: any free port (start-up says which)
    log_format: Literal["auto", "console", "json"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Bearer keys a client must present. A list, or one string of keys separated by
    # commas or whitespace (so "${DRAGOMAN_API_KEYS}" can carry several). Empty: open,
    # and any bearer value is accepted, as Ollama does.
    api_keys: list[str | KeyPolicy] | str = msgspec.field(default_factory=list)
    # Where per-key counters live, so every replica and server process counts together
    # (redis://host:6379/0); None: in each process.
    redis: str | None = None
    api_keys_file: str | None = None  # one key per line; '#' starts a comment
    # Paths that never need a key (clients probe these before they authenticate).
    open_paths: list[str] = msgspec.field(
        default_factory=lambda: ["/", "/api/version", "/health/live", "/health/ready"]
    )
    # Origins browsers may call from (CORS), as patterns where * matches within one
    # part ("https://*.example.com", "http://localhost:*"). A list, or one string split
    # on commas/whitespace ("${DRAGOMAN_ORIGINS}"); it replaces the default, Ollama's
    # allow-list. Empty: CORS off.
    cors_origins: list[str] | str = msgspec.field(default_factory=lambda: list(OLLAMA_ORIGINS))
    cors_allow_credentials: bool = False  # send Access-Control-Allow-Credentials (cookies, auth)
    # Host names this server answers besides the ones that always reach it (localhost,
    # *.localhost, its loopback addresses, its own name and the address a client connected
    # to): "gw.lan", "*.lan", an address, or "*" for any. A list or one string split on
    # commas/whitespace. Bound to loopback the check is always on (a web page could
    # otherwise reach the server by DNS rebinding); bound elsewhere only when this is set.
    allowed_hosts: list[str] | str = msgspec.field(default_factory=list)
    shutdown_grace: float = 30.0  # seconds running streams get after SIGTERM
    # Seconds an SSE stream may go without an event before a keep-alive is sent (a
    # comment line on OpenAI's, an Anthropic ping): a long prompt's prefill would
    # otherwise look like a dead connection to proxies and clients. 0: none.
    stream_keepalive: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    # Server processes on the one port. "auto": one per core when every model entry is
    # an upstream server, else one (dragoman/proxy/workers.py says why).
    workers: Annotated[int, msgspec.Meta(ge=1, le=256)] | Literal["auto"] = "auto"
    ui: bool = True  # the web page at /ui (models, health, playground); false turns it off
    # /api/pull of a name the config does not serve (ollama:NAME, smollm2, a registry name) builds it, one
    # build at a time; false refuses that with a 403 (build with `dragoman models prepare`).
    pull_builds: bool = True
    # The Ollama registry a pull of a name not on this machine downloads from (manifest,
    # then blobs by digest; dragoman/backends/onnx/prepare/registry.py); "" turns that off.
    registry: Annotated[str, msgspec.Meta(pattern=r"^(https?://[^\s/]+(/[^\s]*)?)?$")] = "https://registry.ollama.ai"
    limits: Limits = Limits()
    image_fetch: ImageFetch = ImageFetch()
    responses: ResponseStoreConfig = ResponseStoreConfig()
    tracing: TracingConfig = TracingConfig()

    def __post_init__(self) -> None:
        for entry in listed(self.allowed_hosts):
            if problem := host_entry_problem(entry):
                raise ValueError(problem)


# Keys of a model entry that every backend shares; everything else is backend settings.
COMMON_MODEL_KEYS = frozenset({"name", "backend", "defaults", "context_length", "keep_alive", "description", "system"})


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True):
    """One ``models:`` entry, less its backend settings."""

    name: str
    backend: str
    defaults: SamplingOptions = SamplingOptions()
    context_length: int | None = None
    # Seconds, or a Go-style duration string ("5m", "1h"); negative keeps forever.
    keep_alive: float | str | None = None
    description: str | None = None
    # A system prompt for requests whose first message is not one (as Ollama's SYSTEM).
    system: str | None = None

    @property
    def is_pattern(self) -> bool:
        return any(c in self.name for c in "*?[")


class RawConfig(msgspec.Struct, forbid_unknown_fields=True):
    """The file as written: model entries still hold their backend keys."""

    server: ServerConfig = ServerConfig()
    models: list[dict[str, Any]] = msgspec.field(default_factory=list)
    aliases: dict[str, str] = msgspec.field(default_factory=dict)


class ModelRoute(msgspec.Struct):
    """A model entry ready to serve: shared keys, decoded backend settings."""

    config: ModelConfig
    settings: msgspec.Struct
    keep_alive: float  # seconds, resolved from the entry or the default


class Config(msgspec.Struct):
    server: ServerConfig
    models: list[ModelRoute]
    aliases: dict[str, str]
    source: str = "<built-in>"
    api_keys: list[str] = msgspec.field(default_factory=list)  # resolved from list, string and file
    key_policies: list[KeyPolicy] = msgspec.field(default_factory=list)  # the api_keys given as objects
