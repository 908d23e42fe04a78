"""A pytest plugin (loaded by tests/conftest.py) that keeps tests apart.

It lives outside the conftest so that its autouse fixtures are judged on their own:
tests/support/markers.py calls a test ``unit`` only when the modules defining all of its
fixtures start nothing, and the conftest starts servers.
"""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from typing import NoReturn

import pytest

from tests.support.scripted import ScriptedBackend
from tests.support.stand_ins import reset_all


@pytest.fixture(autouse=True)
def _fresh_stand_ins() -> None:
    """What the scripted backend and the running stand-in upstreams recorded belongs to
    the test that made it: each test starts from nothing."""
    ScriptedBackend.reset()
    reset_all()


def _refuse(what: str) -> Callable[..., NoReturn]:
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        pytest.fail(
            f"a unit test {what}: unit tests start no server, listener or process "
            "(tests/support/markers.py says which tests are unit; a test that needs one "
            "belongs in a module that imports what starts it)",
            pytrace=True,
        )

    return refuse


@pytest.fixture(autouse=True)
def _unit_tests_start_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    """Holds ``unit`` tests to their marker while they run."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "listen", _refuse("listens on a socket"))
        patch.setattr(subprocess.Popen, "__init__", _refuse("starts a process"))
        patch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("starts a process"))
        patch.setattr(os, "fork", _refuse("forks"))
        yield
