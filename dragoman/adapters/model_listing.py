"""The served models as a dialect lists them on ``GET /v1/models`` and
``GET /v1/models/{id}``: the route gathers :class:`ListedModel`\\ s, the client's
dialect writes them (``Dialect.model_listing``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec


class ListedModel(msgspec.Struct, frozen=True):
    name: str
    backend: str  # the config entry's backend kind
    created: dt.datetime  # when this server started: the names are its
    context_length: int | None = None


class ModelListing(Protocol):
    def page(self, models: Sequence[ListedModel], query: Mapping[str, str]) -> bytes:
        """The listing (or one page of it, as ``query`` asks)."""
        ...

    def one(self, model: ListedModel) -> bytes: ...
