"""Choosing an endpoint among several: the one holding the request's prefix
(affinity.py) while it is healthy and not the most loaded, else least outstanding
requests; passive health.

No probes: an endpoint's health is what its last requests did. ``max_failures``
failures in a row send it into a cooldown, during which it is skipped while any other
endpoint is healthy; after the cooldown one request tries it again, and one more
failure sends it straight back.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from urllib.parse import unquote, urlsplit, urlunsplit

import structlog

from dragoman.adapters.canonical import Secret
from dragoman.backends.upstream.affinity import rendezvous_order

log = structlog.get_logger("dragoman.upstream")


def display_url(url: str) -> str:
    """``url`` without any ``user:password@``, fit for logs and error messages."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def has_credentials(url: str) -> bool:
    return "@" in urlsplit(url).netloc


def split_credentials(url: str) -> tuple[str, Secret | None, list[str]]:
    """``http://user:pass@host/v1`` as ``http://host/v1``, the ``Authorization: Basic``
    value the credentials stand for, and the secrets to redact if a server echoes
    them. Clients refuse a URL with credentials next to an Authorization header, and
    a URL is shown in logs and errors; a header is neither."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, []
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    secrets = [s for s in (token, unquote(password), password) if s]
    return urlunsplit(parts._replace(netloc=host)), Secret(f"Basic {token}"), secrets


class Endpoint:
    __slots__ = ("url", "label", "authorization", "secrets", "outstanding", "failures", "cooling_until")

    def __init__(self, url: str) -> None:
        self.url, self.authorization, self.secrets = split_credentials(url)  # url: without credentials
        self.label = self.url
        self.outstanding = 0  # requests sent and not yet finished
        self.failures = 0  # in a row
        self.cooling_until = 0.0  # clock value before which it is skipped

    def __repr__(self) -> str:
        return f"Endpoint({self.label!r}, outstanding={self.outstanding}, failures={self.failures})"


class EndpointPool:
    """The endpoints of one model entry and what their recent requests did."""

    def __init__(
        self,
        urls: list[str],
        *,
        max_failures: int,
        cooldown: float,
        model: str = "",
        clock: Callable[[], float] = time.monotonic,
        affinity: bool = False,
    ) -> None:
        self.endpoints = [Endpoint(url) for url in urls]
        self.affinity = affinity
        self.max_failures = max_failures
        self.cooldown = cooldown
        self._model = model
        self._clock = clock
        self._turn = 0

    def order(self, key: bytes | None = None) -> list[Endpoint]:
        """The endpoints to try, best first: healthy ones by fewest outstanding requests,
        ties taken in turn so idle endpoints share sequential traffic — except that with
        affinity on, the healthy endpoint ``key`` maps to comes first unless it is the
        most loaded of them. Cooling ones come only when none is healthy (soonest ready
        first): trying beats refusing."""
        endpoints = self.endpoints
        if len(endpoints) == 1:
            return endpoints
        now = self._clock()
        self._turn = (self._turn + 1) % len(endpoints)
        rotated = endpoints[self._turn :] + endpoints[: self._turn]
        healthy = [e for e in rotated if e.cooling_until <= now]
        if not healthy:
            return sorted(endpoints, key=_ready_at)
        by_load = sorted(healthy, key=_outstanding)  # stable: rotation breaks ties
        if not self.affinity or key is None or len(healthy) == 1:
            return by_load
        preferred = healthy[rendezvous_order(key, [e.url for e in healthy])[0]]
        if preferred.outstanding > by_load[-2 if by_load[-1] is preferred else -1].outstanding:
            return by_load  # the most loaded: the least loaded serves, the prefix is recomputed there
        return [preferred, *(e for e in by_load if e is not preferred)]

    def succeeded(self, endpoint: Endpoint) -> None:
        if endpoint.failures:
            if endpoint.failures >= self.max_failures:
                log.info("upstream endpoint recovered", model=self._model, endpoint=endpoint.label)
            endpoint.failures = 0
            endpoint.cooling_until = 0.0

    def failed(self, endpoint: Endpoint, reason: str) -> None:
        endpoint.failures += 1
        if endpoint.failures >= self.max_failures:
            endpoint.cooling_until = self._clock() + self.cooldown
            log.warning(
                "upstream endpoint skipped for a cooldown",
                model=self._model,
                endpoint=endpoint.label,
                failures=endpoint.failures,
                cooldown_s=self.cooldown,
                reason=reason,
            )

    def healthy(self, endpoint: Endpoint) -> bool:
        return endpoint.cooling_until <= self._clock()


def _outstanding(endpoint: Endpoint) -> int:
    return endpoint.outstanding


def _ready_at(endpoint: Endpoint) -> float:
    return endpoint.cooling_until


__all__ = ["Endpoint", "EndpointPool", "display_url", "has_credentials", "split_credentials"]
