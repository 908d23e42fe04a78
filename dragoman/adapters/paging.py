"""Listings paged by a client's query: the ``limit`` every listing takes, OpenAI's item
lists (``order``, ``after``) and Anthropic's model pages (``after_id``, ``before_id``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from dragoman.adapters.errors import RequestError

T = TypeVar("T")


def page_limit(raw: str | None, *, default: int, maximum: int) -> int:
    """A listing's ``limit`` query parameter, checked."""
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise RequestError(f"limit: must be an integer, got '{raw}'", param="limit") from None
    if not 1 <= limit <= maximum:
        raise RequestError(f"limit: must be between 1 and {maximum}, got {limit}", param="limit")
    return limit


def item_page(
    items: Sequence[dict[str, Any]], query: Mapping[str, str], *, maximum: int, default: int = 20
) -> tuple[list[dict[str, Any]], bool]:
    """One page of an OpenAI item list (oldest first in ``items``) and whether more
    follow: ``order`` (``desc``, the default, is newest first), then the items after
    the one whose id is ``after`` (none when no item has it), at most ``limit``."""
    limit = page_limit(query.get("limit"), default=default, maximum=maximum)
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError(f"order: unsupported value '{order}'; allowed: asc, desc", param="order")
    ordered = list(items) if order == "asc" else list(reversed(items))
    if (after := query.get("after")) is not None:
        ids = [item.get("id") for item in ordered]
        ordered = ordered[ids.index(after) + 1 :] if after in ids else []
    return ordered[:limit], len(ordered) > limit


def id_page(
    items: Sequence[T], id_of: Callable[[T], str], query: Mapping[str, str], *, default: int, maximum: int
) -> tuple[list[T], bool]:
    """One page of an Anthropic listing and whether more follow: the items after
    ``after_id`` or before ``before_id`` (an unknown id pages from the end it names
    past: nothing after it, nothing before it), at most ``limit``."""
    limit = page_limit(query.get("limit"), default=default, maximum=maximum)
    ids = [id_of(item) for item in items]
    if (after := query.get("after_id")) is not None:
        start = ids.index(after) + 1 if after in ids else len(ids)
        return list(items[start : start + limit]), start + limit < len(items)
    if (before := query.get("before_id")) is not None:
        end = ids.index(before) if before in ids else 0
        return list(items[max(0, end - limit) : end]), end - limit > 0
    return list(items[:limit]), limit < len(items)
