"""What a Responses request reads before the model runs, shared by ``/v1/responses``,
``/v1/responses/input_tokens`` and the conversation routes: whose store rows it may see
(``owner_of``), the earlier items it continues (``history_of``) and its fetched images."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import structlog
from litestar import Request

from dragoman.adapters import responses
from dragoman.adapters.errors import DragomanError, RequestError
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.compaction import latest_compaction_view
from dragoman.adapters.responses.conversations import conversation_id
from dragoman.proxy.auth import key_owner, presented_key
from dragoman.proxy.image_fetch import check_before_fetching, fetch_as_data_uris
from dragoman.proxy.models import ModelTable
from dragoman.proxy import conversations
from dragoman.proxy.response_store import ResponseStore, StoredResponse

log = structlog.get_logger("dragoman.responses")

_item_list = msgspec.json.Decoder(list[dict[str, Any]])
_output_decoder = msgspec.json.Decoder(wire.ResponseOutput)


RUNNING = ("queued", "in_progress")


class _Status(msgspec.Struct):
    status: str | None = None


_status = msgspec.json.Decoder(_Status)


class ResponseNotFound(DragomanError):
    status = 404

    def __init__(self, response_id: str, param: str | None = None) -> None:
        where = f"{param}: " if param else ""
        super().__init__(
            f"{where}response '{response_id}' not found (never stored, stored with store: false, expired or deleted)",
            param=param,
            code="response_not_found",
        )


class RunsElsewhere(DragomanError):
    """A background response running in another server process of this store (another of
    ``server.workers``, or a replica): its events are in that process's memory."""

    status = 409

    def __init__(self, response_id: str, what: str, param: str | None = None) -> None:
        super().__init__(
            f"response '{response_id}' is a background response running in another server process "
            f"(server.workers or a replica); {what}", param=param, code="response_runs_elsewhere",
        )  # fmt: skip


def stored_status(row: StoredResponse) -> str | None:
    """The ``status`` of a stored response object (``queued`` and ``in_progress`` while a
    background run holds it)."""
    return _status.decode(row.response).status


async def store_response(store: ResponseStore, response_id: str, body: bytes, context: bytes, owner: str) -> bool:
    """Whether the response was kept. When it was not (too big for the store, or the disk
    failed) the reply says ``store: false``, which the SDKs parse, rather than a 413 that
    would throw the generated answer away, or a ``store: true`` whose id then 404s."""
    try:
        return await store.put(StoredResponse(response_id, time.time(), body, context, owner))
    except Exception as exc:  # the reply itself is good; a full disk must not cut it
        log.error("could not store the response", response_id=response_id, error=str(exc))
        return False


def owner_of(request: Request[Any, Any, Any], models: ModelTable) -> str:
    return key_owner(presented_key(request.scope), bool(models.config.api_keys))


async def get_response(store: ResponseStore, response_id: str, owner: str) -> StoredResponse | None:
    """A stored response of this key's (a conversation's row, in the same store, is not one)."""
    return None if conversations.is_conversation(response_id) else await store.get(response_id, owner)


async def history_of(store: ResponseStore, request: wire.ResponsesRequest, owner: str) -> list[dict[str, Any]]:
    """The items the turn continues, in order: an earlier response's (what it saw and
    produced) or a conversation's; only ever this key's."""
    if (conversation := conversation_id(request)) is not None:
        return latest_compaction_view((await conversations.load(store, conversation, owner, param="conversation"))[1])
    previous_id = request.previous_response_id
    if previous_id is None:
        return []
    stored = await get_response(store, previous_id, owner)
    if stored is None:
        raise ResponseNotFound(previous_id, param="previous_response_id")
    earlier = _output_decoder.decode(stored.response)
    if earlier.status in RUNNING:
        raise RequestError(
            f"previous_response_id: response '{previous_id}' is still {earlier.status} (a background response); "
            "poll it until it completes, then continue from it", param="previous_response_id",
        )  # fmt: skip
    return latest_compaction_view([*_item_list.decode(stored.input), *responses.output_items(earlier)])


async def fetched_images(models: ModelTable, model: str, items: list[wire.InputItem]) -> dict[str, str]:
    fetch = models.config.server.image_fetch
    urls = responses.remote_image_urls(items) if fetch.enabled else []
    if not urls:
        return {}
    check_before_fetching(models, model, len(responses.image_parts(items)))
    return await fetch_as_data_uris(urls, fetch)
