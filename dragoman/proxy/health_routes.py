"""Health probes and Prometheus metrics."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable

import msgspec
from litestar import Response, Router, get
from litestar.di import NamedDependency
from litestar.handlers import HTTPRouteHandler

from dragoman.backends.base import Backend, ReadinessProbe
from dragoman.proxy.auth import key_matches
from dragoman.proxy.context import ClientKey
from dragoman.proxy.metrics import CONTENT_TYPE, Metrics
from dragoman.proxy.models import ModelTable

READY_CHECK_TIMEOUT = 5.0
# /health/ready is open to anyone and each probe is a request to every upstream with
# the operator's keys: 20 calls with 5 upstreams were 88 upstream requests. A result
# is reused this long, and calls that arrive while a probe runs wait for that probe.
READY_CACHE_SECONDS = 3.0


class Check(msgspec.Struct):
    name: str
    ok: bool
    detail: str = ""


class Health(msgspec.Struct):
    status: str
    checks: list[Check] = msgspec.field(default_factory=list)


@get("/live", summary="The process is up", tags=["Health"])
async def live() -> Health:
    return Health(status="ok")


@get(
    "/ready",
    summary="Config loaded, local models loadable, upstreams reachable",
    description="Without a valid key (when keys are configured) only the status; the checks name files and URLs.",
    tags=["Health"],
)
async def ready(models: NamedDependency[ModelTable], client_key: NamedDependency[ClientKey]) -> Response[Health]:
    checks = [Check(name="config", ok=True, detail=models.config.source)]
    if models.lifetime.draining:
        checks.append(Check(name="shutdown", ok=False, detail="server is shutting down"))
    checks += await _probes(models).checks(lambda: _check_all(models))
    ok = all(check.ok for check in checks)
    if not _may_see_details(client_key.key, models.config.api_keys):
        checks = []  # the probe is open to anyone; paths and URLs are not
    return Response(Health(status="ready" if ok else "not ready", checks=checks), status_code=200 if ok else 503)


def _may_see_details(key: str | None, api_keys: list[str]) -> bool:
    if not api_keys:
        return True  # an open server hides nothing from anyone
    return key is not None and key_matches(key, [k.encode() for k in api_keys])


class ReadyProbes:
    """The backends' checks, reused for ``READY_CACHE_SECONDS``; one probe at a time."""

    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._checks: list[Check] | None = None
        self._taken = 0.0
        self._running: asyncio.Future[list[Check]] | None = None

    async def checks(self, probe: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
        if self._checks is not None and time.monotonic() - self._taken < self._ttl:
            return self._checks
        if self._running is None:
            self._running = asyncio.ensure_future(self._take(probe))
        # shielded: a caller that hangs up does not cancel the probe the others wait for
        return await asyncio.shield(self._running)

    async def _take(self, probe: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
        try:
            checks = await probe()
            self._checks, self._taken = checks, time.monotonic()
            return checks
        finally:
            self._running = None


_READY_PROBES: weakref.WeakKeyDictionary[ModelTable, ReadyProbes] = weakref.WeakKeyDictionary()


def _probes(models: ModelTable) -> ReadyProbes:
    return _READY_PROBES.setdefault(models, ReadyProbes(READY_CACHE_SECONDS))


async def _check_all(models: ModelTable) -> list[Check]:
    return list(await asyncio.gather(*(_check(route.config.name, backend) for route, backend in models.entries())))


async def _check(name: str, backend: Backend) -> Check:
    """A backend may offer ``async ready() -> (ok, detail)``; without it, it is ready."""
    if not isinstance(backend, ReadinessProbe):
        return Check(name=f"model:{name}", ok=True)
    try:
        ok, detail = await asyncio.wait_for(backend.ready(), READY_CHECK_TIMEOUT)
    except TimeoutError:
        ok, detail = False, f"no answer within {READY_CHECK_TIMEOUT:g} s"
    except Exception as exc:  # a failing probe is a finding, not a crash
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    return Check(name=f"model:{name}", ok=ok, detail=detail)


def metrics_route(metrics: Metrics) -> HTTPRouteHandler:
    @get("/metrics", summary="Prometheus metrics", tags=["Health"], include_in_schema=False)
    async def scrape() -> Response[bytes]:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return scrape


health_router = Router(path="/health", route_handlers=[live, ready])
