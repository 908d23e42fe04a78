"""What the page shows of the config: the routing table as ``dragoman config check``
prints it, and each entry's settings with every secret masked.

Masking works on names and shapes, not on a list of known backends, so a third-party
backend's ``token:`` or ``headers: {Authorization: …}`` is masked too: a string under a
key that looks secret becomes ``***``, and URLs lose their ``user:password@`` and the
values of their query strings. The API keys themselves never leave the server.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from dragoman.backends.upstream.endpoints import display_url
from dragoman.config import Config, ModelRoute, check_report
from dragoman.proxy.version import __version__

MASK = "***"
_SECRET_KEY = re.compile(r"key|token|secret|passw|auth|credential|cookie|signature", re.IGNORECASE)


class EntryView(msgspec.Struct):
    name: str
    backend: str
    match: str  # "exact" or "pattern"
    aliases: list[str]
    answers_from: list[str]  # model folder or upstream URLs, masked
    context_length: int | None
    keep_alive: float  # seconds; negative keeps the model loaded forever
    description: str | None
    defaults: dict[str, Any]
    settings: dict[str, Any]


class ConfigView(msgspec.Struct):
    version: str
    source: str
    check: list[str]
    api_keys: bool  # whether keys are required; never the keys
    server: dict[str, Any]
    entries: list[EntryView]


def config_view(config: Config) -> ConfigView:
    server = masked(msgspec.to_builtins(config.server))
    server["api_keys"] = MASK if config.api_keys else []
    return ConfigView(
        version=__version__,
        source=config.source,
        check=check_report(config),
        api_keys=bool(config.api_keys),
        server=server,
        entries=[_entry(route, config) for route in config.models],
    )


def _entry(route: ModelRoute, config: Config) -> EntryView:
    settings = masked(msgspec.to_builtins(route.settings))
    return EntryView(
        name=route.config.name,
        backend=route.config.backend,
        match="pattern" if route.config.is_pattern else "exact",
        aliases=[alias for alias, target in config.aliases.items() if target == route.config.name],
        answers_from=answers_from(settings),
        context_length=route.config.context_length,
        keep_alive=route.keep_alive,
        description=route.config.description,
        defaults=msgspec.to_builtins(route.config.defaults),
        settings=settings,
    )


def answers_from(settings: dict[str, Any]) -> list[str]:
    """Where an entry's answers come from, read from its (already masked) settings:
    upstream endpoints, one base URL, or a model file or folder."""
    for key in ("endpoints", "base_url", "path"):
        value = settings.get(key)
        if isinstance(value, list) and value:
            return [str(v) for v in value]
        if isinstance(value, str) and value:
            return [value]
    return []


def masked(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(item, key) for item in value]
    if isinstance(value, str):
        if value and _SECRET_KEY.search(key):
            return MASK
        return masked_url(value)
    return value


def masked_url(text: str) -> str:
    """``text`` without credentials if it is a URL: no userinfo, query values hidden."""
    if "://" not in text:
        return text
    try:
        parts = urlsplit(display_url(text))
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:  # not a URL after all; a string that looks half like one
        return MASK
    if query:
        parts = parts._replace(query=urlencode([(name, MASK) for name, _ in query], safe="*"))
    return urlunsplit(parts)
