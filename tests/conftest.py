"""Shared fixtures: real servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.server import RunningServer, config_from_yaml, serve

SCRIPTED_CONFIG = """\
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
    defaults: {temperature: 0.3}
  - name: "family-*"
    backend: tests.support.scripted:ScriptedBackend
  - name: no-tools
    backend: tests.support.scripted:ScriptedBackend
    tools: false
aliases:
  nickname: scripted
"""


@pytest.fixture(scope="session")
def scripted_server() -> Iterator[RunningServer]:
    """dragoman with the test-only scripted backend, for failure paths."""
    with serve(config_from_yaml(SCRIPTED_CONFIG)) as server:
        yield server
