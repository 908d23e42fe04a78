"""Prefix affinity: requests that share a prompt prefix go to the endpoint that already
holds it in its cache (vLLM's and llama-server's prefix caches, a second dragoman's), while
that endpoint is healthy and not the most loaded.

The key is what a conversation's turns share: the client's own cache key
(``prompt_cache_key``, else ``user``) when it sends one, else the model, the tools and the
conversation's opening (its system prompt and first user message, which every later turn
repeats). Each key is mapped to endpoints by rendezvous hashing — every endpoint scored by
a hash of (key, endpoint), highest first — so an endpoint coming or going moves only the
keys it held, and every server process of every replica picks the same endpoint for a key
without sharing any state.
"""

from __future__ import annotations

import hashlib

import msgspec

from dragoman.adapters.canonical import ChatRequest, EmbedRequest, Message, Request, TextPart

# Of a long opening message, what is hashed (a prefix cache is keyed by the start anyway).
OPENING_CHARS = 4096


def affinity_key(request: Request | EmbedRequest) -> bytes | None:
    """The bytes that name what ``request`` shares with its conversation's other turns,
    or None when there is nothing to share (embeddings)."""
    if isinstance(request, EmbedRequest):
        return None
    if request.cache_key:
        return b"key\0" + request.model.encode() + b"\0" + request.cache_key.encode()
    if isinstance(request, ChatRequest):
        tools = msgspec.json.encode([tool.name for tool in request.tools])
        return b"chat\0" + request.model.encode() + b"\0" + tools + b"\0" + _opening(request.messages)
    # A prompt to continue: the next request of an editor or a completion loop extends it.
    return b"prompt\0" + request.model.encode() + b"\0" + ((request.system or "") + "\0" + request.prompt)[:OPENING_CHARS].encode()


def _opening(messages: list[Message]) -> bytes:
    """The system messages and the first user message, as text."""
    parts: list[str] = []
    for message in messages:
        parts.append(message.role + ":" + "".join(p.text for p in message.parts if isinstance(p, TextPart)))
        if message.role == "user":
            break
    return "\n".join(parts)[:OPENING_CHARS].encode()


def rendezvous_order(key: bytes, urls: list[str]) -> list[int]:
    """Indices of ``urls``, highest rendezvous score for ``key`` first."""
    scores = [hashlib.blake2b(key, key=url.encode()[:64], digest_size=8).digest() for url in urls]
    return sorted(range(len(urls)), key=lambda i: scores[i], reverse=True)


__all__ = ["OPENING_CHARS", "affinity_key", "rendezvous_order"]
