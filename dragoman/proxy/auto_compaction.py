"""``context_management: [{type: "compaction", compact_threshold}]`` on a create: when
the prompt the turn would send is longer than the threshold (in the model's own tokens;
no threshold: three quarters of the entry's context length), the conversation is
compacted first (:mod:`adapters.responses.compaction`, as ``/v1/responses/compact``) and
the model answers from the compacted items; the compaction item is the reply's first
output item, and what is stored for the next turn is the compacted items."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from dragoman.adapters import responses
from dragoman.adapters.canonical import ChatRequest
from dragoman.adapters.errors import DragomanError, UnsupportedFeature
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.compaction import compacted_items, compaction_threshold, summary_request
from dragoman.proxy.chat import collect, count_tokens, start_chat
from dragoman.proxy.logging import Observer, finish_side_record
from dragoman.proxy.models import ModelTable
from dragoman.proxy.record import RequestRecord



class Compacted(NamedTuple):
    items: list[dict[str, Any]]  # what the turn reads instead: the user messages, then the compaction item
    canonical: ChatRequest
    item: wire.CompactionItem


async def compact_if_over(
    models: ModelTable, data: wire.ResponsesRequest, canonical: ChatRequest, everything: list[dict[str, Any]],
    record: RequestRecord, receive: Any, authorization: str | None, fetched: dict[str, str], observer: Observer | None,
) -> Compacted | None:
    """The compacted turn when the prompt is past the threshold; None when it is not (or
    no compaction was asked). The summary's request logs and counts as its own."""
    threshold = compaction_threshold(data.context_management)
    if threshold is None:
        return None
    if threshold == 0:
        context_length = models.lookup(data.model)[0].config.context_length
        if context_length is None:
            raise UnsupportedFeature(
                "context_management[0].compact_threshold: model's context length is not known here; send a threshold",
                param="context_management[0].compact_threshold",
            )
        threshold = context_length * 3 // 4
    try:
        prompt = await count_tokens(models, canonical, record)
    except UnsupportedFeature as exc:
        raise UnsupportedFeature(f"context_management: compaction needs the prompt's length; {exc.message}", param="context_management") from None
    if prompt <= threshold:
        return None
    side = RequestRecord(f"{record.request_id}-compaction", "POST", "/v1/responses/compact", "responses")
    try:
        chat = await start_chat(models, summary_request(data.model, canonical.messages), side, authorization=authorization)
        summary = await collect(chat, side, receive)
        side.status = 200
    except DragomanError as exc:
        side.status, side.error = exc.status, exc.message
        raise
    finally:
        finish_side_record(side, observer, compaction=True)
    items = compacted_items(everything, summary)
    turn = msgspec.structs.replace(data, input=responses.decode_items(msgspec.json.encode(items)), previous_response_id=None, conversation=None)
    return Compacted(items, responses.to_canonical(turn, [], fetched), msgspec.convert(items[-1], wire.CompactionItem))
