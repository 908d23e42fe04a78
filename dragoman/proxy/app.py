"""The Litestar application: routes of the four dialects, error rendering, lifespan."""

from __future__ import annotations

import asyncio

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, YamlRenderPlugin

from dragoman.backends.pull import configure_registry
from dragoman.config import Config
from dragoman.proxy.embedding_routes import embedding_router
from dragoman.proxy.anthropic_routes import anthropic_router
from dragoman.proxy.context import REQUEST_DEPENDENCIES
from dragoman.proxy.errors import EXCEPTION_HANDLERS
from dragoman.proxy.auth import auth_middleware_factory
from dragoman.proxy.completion_routes import completion_router
from dragoman.proxy.cors import cors_config
from dragoman.proxy.health_routes import health_router, metrics_route
from dragoman.proxy.host_check import host_check, host_rules
from dragoman.proxy.key_limits import limit_keys, open_limits
from dragoman.proxy.logging import observe_requests
from dragoman.proxy.tracing import start_tracing, stop_tracing, trace_requests
from dragoman.proxy.metrics import Metrics
from dragoman.proxy.model_admin_routes import model_admin_router
from dragoman.proxy.models import BackendFactory, ModelTable, build_backend
from dragoman.proxy.ollama_routes import ollama_router
from dragoman.proxy.openai_routes import openai_router
from dragoman.proxy.origin_check import origin_check
from dragoman.proxy import ui
from dragoman.proxy.response_store import ResponseStore
from dragoman.proxy.response_stores import open_store
from dragoman.proxy.responses_routes import responses_router
from dragoman.proxy.input_tokens_routes import input_tokens_router
from dragoman.proxy.conversation_routes import conversation_router
from dragoman.proxy.background import background_router
from dragoman.proxy.compaction_routes import compaction_router
from dragoman.proxy.strict_body import StrictBodyRequest
from dragoman.proxy.version import __version__


def create_app(config: Config, *, backend_factory: BackendFactory = build_backend) -> Litestar:
    """An app serving ``config``. Backends are built when the app starts and closed
    (models unloaded, connections closed) when it stops."""
    table: ModelTable | None = None
    store: ResponseStore | None = None
    metrics = Metrics(lambda: table.gauges() if table is not None else iter(()))
    limits = open_limits(config.key_policies, config.server.redis)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        nonlocal table, store
        table = ModelTable(config, backend_factory)
        # Where pulls of names not on this machine go. Process-wide (the command line's
        # pulls read it too), so put back when the app stops: an app made and stopped
        # inside another (a test, an embedding program) does not change the outer one's.
        previous_registry = configure_registry(config.server.registry)
        store = open_store(config.server.responses)
        app.state.models = table
        try:
            yield
        finally:
            table.lifetime.begin_shutdown()
            await table.lifetime.drained()
            await table.aclose()
            await store.aclose()
            if limits is not None:
                await limits.counters.aclose()  # Redis connections, else left to the OS at exit
            await asyncio.to_thread(stop_tracing)
            configure_registry(previous_registry)

    def provide_models() -> ModelTable:
        assert table is not None, "the app's lifespan has not started"
        return table

    def provide_store() -> ResponseStore:
        assert store is not None, "the app's lifespan has not started"
        return store

    server = config.server
    middleware: list[Any] = []
    routes: list[Any] = [
        openai_router, anthropic_router, responses_router, input_tokens_router, conversation_router, background_router, compaction_router, ollama_router, completion_router, embedding_router,
        model_admin_router, health_router, metrics_route(metrics),
    ]
    open_paths = list(server.open_paths)
    if server.ui:
        routes.append(ui.ui_router(config))
        open_paths += ui.open_paths()
    if config.api_keys:
        middleware.append(auth_middleware_factory(config.api_keys, open_paths))
    if limits is not None:
        middleware.append(limit_keys(limits))
    cors = cors_config(server)
    app = Litestar(
        route_handlers=routes,
        dependencies={
            "models": Provide(provide_models, sync_to_thread=False),
            "response_store": Provide(provide_store, sync_to_thread=False),
            **REQUEST_DEPENDENCIES,
        },
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=middleware,
        lifespan=[lifespan],
        cors_config=cors,
        request_max_body_size=server.limits.max_body_bytes,
        request_class=StrictBodyRequest,  # bodies decoded by msgspec's strict rules, not Litestar's lax ones
        openapi_config=OpenAPIConfig(
            title="dragoman",
            version=__version__,
            description="OpenAI Chat Completions and Responses, Anthropic Messages and Ollama chat, served by backends chosen per model.",
            path="/schema",
            # The document only (/schema is its JSON): Swagger UI and the other renderers load
            # their scripts from a CDN onto the API's own origin.
            render_plugins=[JsonRenderPlugin(), YamlRenderPlugin()],
        ),
        logging_config=None,
        debug=False,
    )
    app.state.metrics = metrics
    # Host and Origin are checked before CORS and routing (no handler runs for a request
    # they refuse), inside the observer, so that every answer is observed and gets its
    # id: these refusals, a refused key, and the 404s and 405s route middleware never sees.
    handler = origin_check(cors)(app.asgi_handler)
    if (rules := host_rules(server)) is not None:
        handler = host_check(rules)(handler)
    if (tracer := start_tracing(server.tracing)) is not None:
        handler = trace_requests(tracer)(handler)
    app.asgi_handler = observe_requests(metrics)(handler)
    return app
