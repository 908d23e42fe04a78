"""The web page at ``/ui``: one HTML page, its static files, and two small JSON views.

The page reads everything else through the same public endpoints clients use
(``/api/tags``, ``/api/show``, ``/api/ps``, ``/v1/models``, ``/api/chat``,
``/v1/chat/completions``, ``/health/ready``, ``/metrics``), with the API key as a bearer
token. Only the page and its static files are open: they hold no data and no secret.
The JSON views need the key like every other endpoint.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jinja2
import msgspec
from litestar import MediaType, Request, Response, Router, get, post
from litestar.datastructures import ResponseHeader
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

from dragoman.adapters.canonical import ChatRequest
from dragoman.backends.admission import Admission
from dragoman.config import Config
from dragoman.proxy.chat import prepare
from dragoman.proxy.limits import check_message_count
from dragoman.proxy.models import ModelTable
from dragoman.proxy.record import RequestRecord
from dragoman.proxy.ui.config_view import ConfigView, config_view
from dragoman.proxy.ui.turn import Turn, canonical_request, decode_turn, turn_view
from dragoman.proxy.version import __version__

HERE = Path(__file__).parent
STATIC = HERE / "static"
MAX_TURN_BYTES = 4 * 1024 * 1024  # a turn's request and reply, as the page sends them back

# Everything the page loads comes from this server; no inline script or style, no
# frames, no form posts, no plugins. connect-src 'self' keeps fetch() to this origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    ResponseHeader(name="Content-Security-Policy", value=CONTENT_SECURITY_POLICY),
    ResponseHeader(name="X-Content-Type-Options", value="nosniff"),
    ResponseHeader(name="Referrer-Policy", value="no-referrer"),
    ResponseHeader(name="X-Frame-Options", value="DENY"),
    ResponseHeader(name="Cache-Control", value="no-store"),
]


def ui_router(config: Config) -> Router:
    page = render_page(config)
    files = static_files()
    # A 4 MiB turn is about a second of Python (every frame decoded, converted, written
    # again): built on a thread, so the event loop keeps answering, and one at a time,
    # so that four at once do not take four shares of the GIL from it.
    turns = Admission(1, config.server.limits.max_queue)

    @post("/api/turn", status_code=200, include_in_schema=False, request_max_body_size=MAX_TURN_BYTES)
    async def show_turn(request: Request[Any, Any, Any], models: NamedDependency[ModelTable]) -> Response[bytes]:
        body = await request.body()
        async with turns.slot("ui-turn"):
            turn, sent = await asyncio.to_thread(_decoded_turn, body, models)
            # A record of its own: this view is not a chat and must not count as one in /metrics.
            _, _, served = prepare(models, sent, RequestRecord("ui-turn", "POST", request.url.path))
            view = await asyncio.to_thread(_encoded_view, turn, sent, served)
        return Response(view, media_type=MediaType.JSON)

    @get("/static/{name:str}", include_in_schema=False)
    async def static(name: FromPath[str]) -> Response[bytes]:
        # Looked up by name among the files read at start-up: no path ever reaches the disk.
        found = files.get(name)
        if found is None:
            raise NotFoundException()
        body, media_type = found
        return Response(body, media_type=media_type)

    @get("/", include_in_schema=False)
    async def index() -> Response[bytes]:
        return Response(page, media_type=MediaType.HTML)

    return Router(
        path="/ui",
        route_handlers=[index, static, show_config, show_turn],
        response_headers=SECURITY_HEADERS,
        include_in_schema=False,
    )


def open_paths() -> list[str]:
    """The page and its files: what a browser fetches before it can send a key."""
    return ["/ui", "/ui/", *(f"/ui/static/{name}" for name in static_files())]


_MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


def static_files() -> dict[str, tuple[bytes, str]]:
    return {
        path.name: (path.read_bytes(), _MEDIA_TYPES[path.suffix])
        for path in sorted(STATIC.iterdir())
        if path.suffix in _MEDIA_TYPES
    }


def render_page(config: Config) -> bytes:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    html = env.get_template("index.html").render(version=__version__, keys_required=bool(config.api_keys))
    return html.encode()


@get("/api/config", include_in_schema=False)
async def show_config(models: NamedDependency[ModelTable]) -> ConfigView:
    return config_view(models.config)


def _decoded_turn(body: bytes, models: ModelTable) -> tuple[Turn, ChatRequest]:
    turn = decode_turn(body)
    sent = canonical_request(turn)
    check_message_count(len(sent.messages), models.limits)  # as the chat routes bound it
    return turn, sent


def _encoded_view(turn: Turn, sent: ChatRequest, served: ChatRequest) -> bytes:
    return msgspec.json.encode(turn_view(turn, sent, served))
