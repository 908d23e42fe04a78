"""Undoing a ``Content-Encoding`` without ever producing more than a limit.

A kilobyte of zstd or gzip can stand for a gigabyte of zeros; decompressing it and
then checking the size is how one image URL cost 2.2 GB. Every decoder here is asked
for at most ``limit + 1`` bytes, so going over is noticed the moment it happens.
zstd and br are decoded when their libraries (``zstandard``, ``brotli``) are
installed and refused by name otherwise; gzip and deflate are the standard library's.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable


class TooLarge(Exception):
    """The decoded body would exceed the limit."""


class UnsupportedEncoding(Exception):
    """An encoding that is not decoded here; ``args[0]`` names it."""


Decoder = Callable[[bytes, int], bytes]


def decode_body(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """``raw`` with every listed encoding undone (last applied, first undone);
    :class:`TooLarge` as soon as any stage passes ``limit`` bytes."""
    data = raw
    for coding in reversed([c.strip().lower() for c in content_encoding.split(",") if c.strip()]):
        if coding == "identity":
            continue
        decoder = _DECODERS.get(coding) or _optional(coding)
        if decoder is None:
            raise UnsupportedEncoding(coding)
        data = decoder(data, limit)
        if len(data) > limit:
            raise TooLarge(coding)
    if len(data) > limit:
        raise TooLarge("identity")
    return data


def _zlib(wbits: int) -> Decoder:
    def decode(data: bytes, limit: int) -> bytes:
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(data, limit + 1)  # max_length: the bound is inside zlib
        except zlib.error as exc:
            raise ValueError(f"not valid {'gzip' if wbits > 15 else 'deflate'} data: {exc}") from exc
        return out

    return decode


def _deflate(data: bytes, limit: int) -> bytes:
    """HTTP's ``deflate`` is zlib-wrapped; some servers send it raw."""
    try:
        return _zlib(zlib.MAX_WBITS)(data, limit)
    except ValueError:
        return _zlib(-zlib.MAX_WBITS)(data, limit)


def _zstd(data: bytes, limit: int) -> bytes:
    import zstandard

    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        out = bytearray()
        while len(out) <= limit and (piece := reader.read(limit + 1 - len(out))):  # decodes only as far as read
            out += piece
        return bytes(out)
    except zstandard.ZstdError as exc:
        raise ValueError(f"not valid zstd data: {exc}") from exc


def _brotli(data: bytes, limit: int) -> bytes:
    import brotli

    try:
        return brotli.Decompressor().process(data, output_buffer_limit=limit + 1)
    except brotli.error as exc:
        raise ValueError(f"not valid br data: {exc}") from exc


_DECODERS: dict[str, Decoder] = {"gzip": _zlib(16 + zlib.MAX_WBITS), "x-gzip": _zlib(16 + zlib.MAX_WBITS), "deflate": _deflate}
_OPTIONAL: dict[str, tuple[str, Decoder]] = {"zstd": ("zstandard", _zstd), "br": ("brotli", _brotli)}


def _optional(coding: str) -> Decoder | None:
    entry = _OPTIONAL.get(coding)
    if entry is None:
        return None
    module, decoder = entry
    try:
        __import__(module)
    except ImportError:
        return None
    return decoder


__all__ = ["TooLarge", "UnsupportedEncoding", "decode_body"]
