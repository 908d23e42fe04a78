"""The Litestar application: routes of both dialects, error rendering, lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin

from config import Config
from proxy.errors import EXCEPTION_HANDLERS
from proxy.logging import request_log_middleware
from proxy.models import BackendFactory, ModelTable, build_backend
from proxy.ollama_routes import ollama_router
from proxy.openai_routes import openai_router
from proxy.version import __version__


def create_app(config: Config, *, backend_factory: BackendFactory = build_backend) -> Litestar:
    """An app serving ``config``. Backends are built when the app starts and closed
    (models unloaded, connections closed) when it stops."""
    table: ModelTable | None = None

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        nonlocal table
        table = ModelTable(config, backend_factory)
        app.state.models = table
        try:
            yield
        finally:
            await table.aclose()

    def provide_models() -> ModelTable:
        assert table is not None, "the app's lifespan has not started"
        return table

    return Litestar(
        route_handlers=[openai_router, ollama_router],
        dependencies={"models": Provide(provide_models, sync_to_thread=False)},
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[request_log_middleware],
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(
            title="dragoman",
            version=__version__,
            description="OpenAI Chat Completions and Ollama chat, served by backends chosen per model.",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
        ),
        logging_config=None,
        debug=False,
    )


def app_from_env() -> Any:
    """For ``uvicorn proxy.app:app_from_env --factory``: config from $DRAGOMAN_CONFIG."""
    import os

    from backends.registry import settings_type
    from config import load_config

    return create_app(load_config(os.environ.get("DRAGOMAN_CONFIG"), settings_type))
