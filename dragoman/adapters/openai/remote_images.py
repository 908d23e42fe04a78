"""Remote image URLs in an OpenAI request: find them, and swap in fetched data URIs.

Fetching is I/O and lives in the proxy (off unless configured); these pure functions
let it run before :func:`adapters.openai.to_canonical` without changing the converter.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from dragoman.adapters.openai import wire


def _url_of(part: wire.ContentPart) -> str | None:
    if part.type != "image_url" or part.image_url is None:
        return None
    return part.image_url if isinstance(part.image_url, str) else part.image_url.url


def remote_image_urls(request: wire.ChatCompletionRequest) -> list[str]:
    """Every http(s) image URL in the request, in order, without repeats."""
    urls: dict[str, None] = {}
    for message in request.messages:
        if isinstance(message.content, list):
            for part in message.content:
                url = _url_of(part)
                if url is not None and url.lower().startswith(("http://", "https://")):
                    urls[url] = None
    return list(urls)


def image_part_count(request: wire.ChatCompletionRequest) -> int:
    """Every ``image_url`` part, remote or inline: what the image limit counts."""
    return sum(
        1
        for message in request.messages
        if isinstance(message.content, list)
        for part in message.content
        if part.type == "image_url"
    )


def with_fetched_images(request: wire.ChatCompletionRequest, data_uris: Mapping[str, str]) -> wire.ChatCompletionRequest:
    """The request with each fetched URL replaced by its data URI."""

    def part(p: wire.ContentPart) -> wire.ContentPart:
        url = _url_of(p)
        if url is None or url not in data_uris:
            return p
        return msgspec.structs.replace(p, image_url=wire.ImageURL(url=data_uris[url]))

    messages = [
        msgspec.structs.replace(m, content=[part(p) for p in m.content]) if isinstance(m.content, list) else m
        for m in request.messages
    ]
    return msgspec.structs.replace(request, messages=messages)
