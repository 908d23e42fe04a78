"""Limits and usage per API key (``server.api_keys`` entries given as objects): ``rpm``
requests and ``tpm`` tokens (prompt + generated) per minute, ``max_concurrent`` requests at
once, and ``models``, the names the key may use.

Counted in Redis when ``server.redis`` is set — one count for every replica and server
process — and in the process otherwise. Minutes are fixed windows (``key:minute``), as
OpenAI and LiteLLM count them. A request over a limit is a 429 with ``Retry-After`` in the
caller's dialect, before any work; its tokens are counted when it ends, so a minute's
``tpm`` can be passed by the requests already running when it filled, never by a request
that starts after. Redis unreachable is a 503: a limit that cannot be counted is not
silently lifted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from dragoman.adapters.errors import DragomanError, Overloaded
from dragoman.config.schema import KeyPolicy
from dragoman.proxy.auth import presented_key
from dragoman.proxy.errors import send_error
from dragoman.proxy.record import SCOPE_KEY, RequestRecord

log = structlog.get_logger("dragoman")

POLICY_KEY = "dragoman.key_policy"
WINDOW = 60.0


class RateLimited(DragomanError):
    status = 429
    code = "rate_limit_exceeded"


class Counters(Protocol):
    """Integer counters shared by whoever counts the same keys."""

    async def add(self, key: str, amount: int, ttl: float) -> int: ...  # the new value
    async def read(self, key: str) -> int: ...
    async def aclose(self) -> None: ...


class LocalCounters:
    """This process's counters (no ``server.redis``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._values: dict[str, tuple[int, float]] = {}
        self._clock = clock

    async def add(self, key: str, amount: int, ttl: float) -> int:
        now = self._clock()
        value, expires = self._values.get(key, (0, now + ttl))
        if expires <= now:
            value, expires = 0, now + ttl
        self._values[key] = (value + amount, expires)
        if len(self._values) > 10_000:  # old windows: drop the expired
            self._values = {k: v for k, v in self._values.items() if v[1] > now}
        return value + amount

    async def read(self, key: str) -> int:
        value, expires = self._values.get(key, (0, 0.0))
        return value if expires > self._clock() else 0

    async def aclose(self) -> None:
        pass


class RedisCounters:
    """Counters in Redis (``INCRBY`` with an expiry), shared by replicas."""

    def __init__(self, url: str) -> None:
        import redis.asyncio

        self._redis: Any = redis.asyncio.from_url(url, socket_connect_timeout=2, socket_timeout=2)

    async def add(self, key: str, amount: int, ttl: float) -> int:
        async with _RedisDown():
            async with self._redis.pipeline(transaction=True) as pipe:
                value, _ = await pipe.incrby(key, amount).expire(key, int(ttl) + 1, nx=True).execute()
            return int(value)

    async def read(self, key: str) -> int:
        async with _RedisDown():
            value = await self._redis.get(key)
            return int(value or 0)

    async def aclose(self) -> None:
        await self._redis.aclose()


class _RedisDown:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: Any, error: Any, traceback: Any) -> None:
        import redis.exceptions

        if isinstance(error, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
            log.warning("redis unreachable: per-key limits cannot be counted", error=str(error))
            raise Overloaded("the limits store (Redis) is not answering; retry shortly", retry_after=2) from error


class KeyLimits:
    def __init__(self, policies: list[KeyPolicy], counters: Counters, clock: Callable[[], float] = time.time) -> None:
        self._by_key = {policy.key: policy for policy in policies}
        self.counters = counters
        self._clock = clock

    def policy_for(self, key: str | None) -> KeyPolicy | None:
        """The policy of a key the auth middleware already let through."""
        return self._by_key.get(key) if key is not None else None

    async def begin(self, policy: KeyPolicy) -> None:
        """Count one request of ``policy``'s key; :class:`RateLimited` when over a limit."""
        now = self._clock()
        minute = int(now // WINDOW)
        retry = max(1, int(WINDOW - now % WINDOW) + 1)
        if policy.tpm is not None:
            used = await self.counters.read(f"dragoman:tpm:{policy.name}:{minute}")
            if used >= policy.tpm:
                raise RateLimited(f"key '{policy.name}': {used} tokens this minute, over its tpm of {policy.tpm}; "
                                  f"retry in {retry} s", retry_after=retry)  # fmt: skip
        if policy.rpm is not None:
            count = await self.counters.add(f"dragoman:rpm:{policy.name}:{minute}", 1, WINDOW)
            if count > policy.rpm:
                raise RateLimited(f"key '{policy.name}': over its rpm of {policy.rpm} requests a minute; retry in {retry} s",
                                  retry_after=retry)  # fmt: skip
        if policy.max_concurrent is not None:
            running = await self.counters.add(f"dragoman:running:{policy.name}", 1, 3600)
            if running > policy.max_concurrent:
                await self.counters.add(f"dragoman:running:{policy.name}", -1, 3600)
                raise RateLimited(f"key '{policy.name}': {policy.max_concurrent} requests already running "
                                  "(its max_concurrent); retry shortly", retry_after=1)  # fmt: skip

    async def end(self, policy: KeyPolicy, tokens: int) -> None:
        if policy.max_concurrent is not None:
            await self.counters.add(f"dragoman:running:{policy.name}", -1, 3600)
        if policy.tpm is not None and tokens:
            await self.counters.add(f"dragoman:tpm:{policy.name}:{int(self._clock() // WINDOW)}", tokens, WINDOW)


def limit_keys(limits: KeyLimits) -> Callable[[Any], Any]:
    """A Litestar middleware (after auth): the key's limits before the handler runs, its
    tokens counted after; the key's name on the request's record (log, metrics, the
    model check in proxy/chat.py)."""

    def middleware(app: Any) -> Any:
        async def check(scope: dict[str, Any], receive: Any, send: Any) -> None:
            policy = limits.policy_for(presented_key(scope)) if scope["type"] == "http" else None
            if policy is None:
                await app(scope, receive, send)
                return
            record: RequestRecord | None = scope.get(SCOPE_KEY)
            if record is not None:
                record.key_name, record.key_policy = policy.name, policy
            try:
                await limits.begin(policy)
            except DragomanError as err:
                await send_error(scope, send, err)
                return
            try:
                await app(scope, receive, send)
            finally:
                usage = record.usage if record is not None else None
                tokens = usage.prompt_tokens + usage.completion_tokens if usage is not None else 0
                try:
                    await limits.end(policy, tokens)
                except DragomanError:
                    pass  # Redis went away mid-request: the reply is sent; the next request says so

        return check

    return middleware


def open_limits(policies: list[KeyPolicy], redis_url: str | None) -> KeyLimits | None:
    if not policies:
        return None
    return KeyLimits(policies, RedisCounters(redis_url) if redis_url else LocalCounters())


__all__ = ["KeyLimits", "LocalCounters", "RateLimited", "RedisCounters", "limit_keys", "open_limits"]
