"""``GET /v1/models`` as Anthropic answers it, paged by ``limit``, ``after_id`` and
``before_id`` as the ``anthropic`` client pages it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

import msgspec

from dragoman.adapters.anthropic import wire
from dragoman.adapters.model_listing import ListedModel
from dragoman.adapters.paging import id_page

MAX_PAGE = 1000
DEFAULT_PAGE = 20


def model_info(model: ListedModel) -> wire.ModelInfo:
    created = model.created.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return wire.ModelInfo(id=model.name, display_name=model.name, created_at=created, max_input_tokens=model.context_length)


def model_page(models: Sequence[ListedModel], query: Mapping[str, str]) -> wire.ModelPage:
    listed = [model_info(m) for m in models]
    page, more = id_page(listed, lambda info: info.id, query, default=DEFAULT_PAGE, maximum=MAX_PAGE)
    return wire.ModelPage(
        data=page, has_more=more, first_id=page[0].id if page else None, last_id=page[-1].id if page else None
    )


class AnthropicModelListing:
    def page(self, models: Sequence[ListedModel], query: Mapping[str, str]) -> bytes:
        return msgspec.json.encode(model_page(models, query))

    def one(self, model: ListedModel) -> bytes:
        return msgspec.json.encode(model_info(model))


MODEL_LISTING = AnthropicModelListing()
