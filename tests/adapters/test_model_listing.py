"""GET /v1/models in each dialect that lists there (Dialect.model_listing), and the
paging helpers the listings share (adapters/paging.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec
import pytest

from dragoman.adapters.dialects import DIALECTS
from dragoman.adapters.errors import RequestError
from dragoman.adapters.model_listing import ListedModel
from dragoman.adapters.paging import id_page, item_page, page_limit

pytestmark = pytest.mark.unit

STARTED = dt.datetime(2026, 12, 5, 4, 0, tzinfo=dt.timezone.utc)
MODELS = [ListedModel(f"m{i}", "onnx", STARTED, 4096 if i else None) for i in range(5)]
NAMES = [m.name for m in MODELS]
LISTING = {d.name: d.model_listing for d in DIALECTS}


def _decoded(body: bytes) -> Any:
    return msgspec.json.decode(body)


def test_which_dialects_list_on_v1_models() -> None:
    assert sorted(name for name, listing in LISTING.items() if listing is not None) == ["anthropic", "openai"]


def test_openai_lists_every_name_as_a_card() -> None:
    assert LISTING["openai"] is not None
    body = _decoded(LISTING["openai"].page(MODELS, {"limit": "1"}))  # OpenAI's listing has no paging
    assert body["object"] == "list"
    assert [c["id"] for c in body["data"]] == NAMES
    assert body["data"][0] == {"id": "m0", "object": "model", "created": int(STARTED.timestamp()), "owned_by": "onnx"}
    assert _decoded(LISTING["openai"].one(MODELS[1]))["id"] == "m1"


def test_anthropic_model_info() -> None:
    assert LISTING["anthropic"] is not None
    info = _decoded(LISTING["anthropic"].one(MODELS[1]))
    assert info == {
        "type": "model", "id": "m1", "display_name": "m1", "created_at": "2026-12-05T04:00:00Z", "max_input_tokens": 4096,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("query", "ids", "has_more", "first", "last"),
    [
        ({}, NAMES, False, "m0", "m4"),
        ({"limit": "2"}, ["m0", "m1"], True, "m0", "m1"),
        ({"limit": "2", "after_id": "m1"}, ["m2", "m3"], True, "m2", "m3"),
        ({"limit": "2", "after_id": "m3"}, ["m4"], False, "m4", "m4"),
        ({"after_id": "nope"}, [], False, None, None),
        ({"limit": "2", "before_id": "m4"}, ["m2", "m3"], True, "m2", "m3"),
        ({"limit": "2", "before_id": "m2"}, ["m0", "m1"], False, "m0", "m1"),
        ({"before_id": "nope"}, [], False, None, None),
    ],
)
def test_anthropic_pages(query: dict[str, str], ids: list[str], has_more: bool, first: str | None, last: str | None) -> None:
    assert LISTING["anthropic"] is not None
    page = _decoded(LISTING["anthropic"].page(MODELS, query))
    assert ([m["id"] for m in page["data"]], page["has_more"], page["first_id"], page["last_id"]) == (ids, has_more, first, last)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 20), ("1", 1), ("100", 100), ("0", "between 1 and 100, got 0"), ("101", "got 101"), ("x", "must be an integer")],
)
def test_page_limit(raw: str | None, expected: int | str) -> None:
    if isinstance(expected, int):
        assert page_limit(raw, default=20, maximum=100) == expected
    else:
        with pytest.raises(RequestError, match=expected) as err:
            page_limit(raw, default=20, maximum=100)
        assert err.value.param == "limit" and err.value.status == 400


ITEMS = [{"id": f"i{n}"} for n in range(4)]  # oldest first


@pytest.mark.parametrize(
    ("query", "ids", "more"),
    [
        ({}, ["i3", "i2", "i1", "i0"], False),
        ({"order": "asc"}, ["i0", "i1", "i2", "i3"], False),
        ({"limit": "2"}, ["i3", "i2"], True),
        ({"limit": "2", "after": "i2"}, ["i1", "i0"], False),
        ({"order": "asc", "after": "i0", "limit": "2"}, ["i1", "i2"], True),
        ({"after": "gone"}, [], False),
    ],
)
def test_item_page(query: dict[str, str], ids: list[str], more: bool) -> None:
    page, has_more = item_page(ITEMS, query, maximum=100)
    assert ([i["id"] for i in page], has_more) == (ids, more)


def test_item_page_names_a_bad_order() -> None:
    with pytest.raises(RequestError, match="order: unsupported value 'up'") as err:
        item_page(ITEMS, {"order": "up"}, maximum=100)
    assert err.value.param == "order"


def test_id_page_is_generic() -> None:
    assert id_page([3, 4, 5], str, {"after_id": "3"}, default=1, maximum=10) == ([4], True)
