"""The usual pair of module fixtures for an upstream test: a replay stand-in playing a
script, and a dragoman gateway whose config routes models to it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, serve


def replay_gateway(script: dict[str, Reply | list[Reply]], config: Callable[[ReplayServer], str]) -> tuple[Any, Any]:
    """The module fixtures ``upstream`` (a stand-in playing ``script``) and ``gateway``
    (serving the YAML ``config`` writes for that stand-in); bind both in the test module
    as ``upstream, gateway = replay_gateway(...)``."""

    @pytest.fixture(scope="module", name="upstream")
    def upstream() -> Iterator[ReplayServer]:
        with replay_server(script) as server:
            yield server

    @pytest.fixture(scope="module", name="gateway")
    def gateway(upstream: ReplayServer) -> Iterator[RunningServer]:
        with serve(config_from_yaml(config(upstream))) as server:
            yield server

    return upstream, gateway
