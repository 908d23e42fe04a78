"""``GET /v1/models`` as OpenAI answers it: every name in one list, no paging."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from dragoman.adapters.model_listing import ListedModel


class ModelCard(msgspec.Struct):
    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = "dragoman"


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: str = "list"


def model_card(model: ListedModel) -> ModelCard:
    return ModelCard(id=model.name, created=int(model.created.timestamp()), owned_by=model.backend)


class OpenAIModelListing:
    def page(self, models: Sequence[ListedModel], query: Mapping[str, str]) -> bytes:
        return msgspec.json.encode(ModelList(data=[model_card(m) for m in models]))

    def one(self, model: ListedModel) -> bytes:
        return msgspec.json.encode(model_card(model))


MODEL_LISTING = OpenAIModelListing()
