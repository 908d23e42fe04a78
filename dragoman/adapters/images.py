"""Images as clients send them: plain base64 (Ollama) or ``data:`` URIs (OpenAI).

The MIME type is sniffed from the bytes, because clients often send none (``data:;base64,``,
Ollama's plain base64) or a wrong one; a declared ``image/*`` type is the fallback.
"""

from __future__ import annotations

import base64
import binascii
import re

from dragoman.adapters.canonical import ImagePart
from dragoman.adapters.errors import RequestError

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)
_DATA_URI = re.compile(r"data:(?P<mime>[^;,]*)(?P<params>(?:;[^;,]*)*),(?P<data>.*)", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")


def sniff_image_mime(data: bytes) -> str | None:
    """The image type the leading bytes announce, or ``None`` if not a known image."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for signature, mime in _SIGNATURES:
        if data.startswith(signature):
            return mime
    return None


def decode_image_data_uri(uri: str, param: str) -> ImagePart:
    """An ``ImagePart`` from ``data:[<mime>][;…];base64,<data>``; ``param`` names the field."""
    match = _DATA_URI.fullmatch(uri.strip())
    if match is None:
        raise RequestError(f"{param}: not a valid data URI", param=param)
    if ";base64" not in match["params"].lower():
        raise RequestError(f"{param}: data URI must be base64-encoded (data:<type>;base64,…)", param=param)
    return _image_part(_b64decode(match["data"], param), match["mime"].strip().lower(), param)


def decode_base64_image(text: str, param: str) -> ImagePart:
    """An ``ImagePart`` from plain base64 or a ``data:`` URI (whose prefix is dropped)."""
    if text.lstrip()[:5].lower() == "data:":
        return decode_image_data_uri(text, param)
    return _image_part(_b64decode(text, param), "", param)


def _b64decode(text: str, param: str) -> bytes:
    compact = _WHITESPACE.sub("", text)
    if not compact:
        raise RequestError(f"{param}: image data is empty", param=param)
    compact += "=" * (-len(compact) % 4)
    altchars = b"-_" if ("-" in compact or "_" in compact) else None
    try:
        return base64.b64decode(compact, altchars=altchars, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(f"{param}: image is not valid base64 ({exc})", param=param) from exc


def _image_part(data: bytes, declared: str, param: str) -> ImagePart:
    mime = sniff_image_mime(data) or (declared if declared.startswith("image/") else None)
    if mime is None:
        raise RequestError(f"{param}: data is not a recognised image (png, jpeg, gif, webp, bmp)", param=param)
    return ImagePart(data=data, mime_type=mime)


__all__ = ["decode_base64_image", "decode_image_data_uri", "sniff_image_mime"]
