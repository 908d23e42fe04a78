"""The ``unit`` / ``real_model`` split (tests/support/markers.py), the guard that holds
unit tests to it (tests/support/isolation.py), and stand-ins reset between tests."""

from __future__ import annotations

import os
import xmlrpc.server

import pytest

from tests.support.markers import heavy_module
from tests.support.scripted import ScriptedBackend
from tests.support.stand_ins import reset_all, reset_between_tests


@pytest.mark.parametrize(
    ("module", "heavy"),
    [
        ("tests.support.server", True),  # uvicorn on a socket
        ("tests.support.replay", True),  # asyncio.start_server
        ("tests.fuzz.processes", True),  # subprocess
        ("tests.support.image_host", True),  # http.server
        ("tests.conftest", True),
        ("tests.adapters.test_fragments", False),
        ("tests.adapters.test_openai_completions", False),  # only TRANSCRIPTS from replay.py
        ("tests.upstream.test_settings", False),  # only config_from_yaml from server.py
        ("tests.support.scripted", False),
        ("dragoman.adapters.canonical", False),  # product code is judged by what tests do with it
    ],
)
def test_heavy_modules_are_the_ones_that_start_something(module: str, heavy: bool) -> None:
    assert heavy_module(module) is heavy


def test_this_module_is_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("real_model") is None


def test_a_unit_test_that_listens_or_starts_a_process_fails() -> None:
    """What the static rule cannot see (a listener or a process started through a library
    it does not list) is stopped while the test runs."""
    with pytest.raises(pytest.fail.Exception, match="listens on a socket"):
        xmlrpc.server.SimpleXMLRPCServer(("127.0.0.1", 0), logRequests=False)
    with pytest.raises(pytest.fail.Exception, match="starts a process"):
        os.popen("true")


class _Counter:
    def __init__(self) -> None:
        self.seen = 1

    def reset(self) -> None:
        self.seen = 0


def test_a_stand_in_is_reset_while_it_runs_and_not_after() -> None:
    counter = _Counter()
    with reset_between_tests(counter):
        reset_all()
        assert counter.seen == 0
        counter.seen = 1
    reset_all()
    assert counter.seen == 1


def test_scripted_records_left_for_the_next_test() -> None:
    ScriptedBackend.started.append("left#0")
    ScriptedBackend.produced["left#0"] = 3


def test_scripted_records_start_empty() -> None:
    """Runs after the test above (file order): nothing it left is seen here."""
    assert ScriptedBackend.started == [] and ScriptedBackend.produced == {} and ScriptedBackend.last_request is None
