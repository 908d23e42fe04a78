"""Every client dialect dragoman speaks, and which one a request is in."""

from __future__ import annotations

from collections.abc import Iterable

from dragoman.adapters.anthropic import DIALECT as ANTHROPIC
from dragoman.adapters.dialect import Dialect, DialectName
from dragoman.adapters.ollama import DIALECT as OLLAMA
from dragoman.adapters.openai import DIALECT as OPENAI
from dragoman.adapters.responses import DIALECT as RESPONSES

# In the order their path prefixes are tried: the longer /v1/ prefixes first, and
# Ollama's (every other path) last.
DIALECTS: tuple[Dialect, ...] = (ANTHROPIC, RESPONSES, OPENAI, OLLAMA)
_BY_NAME = {d.name: d for d in DIALECTS}


def dialect_named(name: DialectName) -> Dialect:
    return _BY_NAME[name]


def dialect_for_path(path: str, headers: Iterable[str] = ()) -> Dialect:
    """The dialect a request on ``path`` speaks: the first whose prefixes match, unless
    that one shares its paths and ``headers`` (names, any case) carry another's claim."""
    owner = next(d for d in DIALECTS if path.startswith(d.path_prefixes))
    if owner.shares_paths:
        names = {h.lower() for h in headers}
        claimant = next((d for d in DIALECTS if d.claim_header is not None and d.claim_header in names), None)
        if claimant is not None:
            return claimant
    return owner
