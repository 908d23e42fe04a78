"""Health probes and Prometheus metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, Response, Router, get
from litestar.di import NamedDependency

from proxy.auth import bearer_token, key_matches
from proxy.metrics import CONTENT_TYPE, Metrics
from proxy.models import ModelTable

READY_CHECK_TIMEOUT = 5.0


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
async def ready(request: Request[Any, Any, Any], models: NamedDependency[ModelTable]) -> Response[Health]:
    checks = [Check(name="config", ok=True, detail=models.config.source)]
    if models.lifetime.draining:
        checks.append(Check(name="shutdown", ok=False, detail="server is shutting down"))
    checks += await asyncio.gather(*(_check(route.config.name, backend) for route, backend in models.entries()))
    ok = all(check.ok for check in checks)
    if not _may_see_details(request.scope, models.config.api_keys):
        checks = []  # the probe is open to anyone; paths and URLs are not
    return Response(Health(status="ready" if ok else "not ready", checks=checks), status_code=200 if ok else 503)


def _may_see_details(scope: Any, api_keys: list[str]) -> bool:
    if not api_keys:
        return True  # an open server hides nothing from anyone
    token = bearer_token(scope)
    return token is not None and key_matches(token, [k.encode() for k in api_keys])


async def _check(name: str, backend: Any) -> Check:
    """A backend may offer ``async ready() -> (ok, detail)``; without it, it is ready."""
    probe = getattr(backend, "ready", None)
    if probe is None:
        return Check(name=f"model:{name}", ok=True)
    try:
        ok, detail = await asyncio.wait_for(probe(), READY_CHECK_TIMEOUT)
    except TimeoutError:
        ok, detail = False, f"no answer within {READY_CHECK_TIMEOUT:g} s"
    except Exception as exc:  # a failing probe is a finding, not a crash
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    return Check(name=f"model:{name}", ok=ok, detail=detail)


def metrics_route(metrics: Metrics) -> Any:
    @get("/metrics", summary="Prometheus metrics", tags=["Health"], include_in_schema=False)
    async def scrape() -> Response[bytes]:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return scrape


health_router = Router(path="/health", route_handlers=[live, ready])
