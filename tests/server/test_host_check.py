"""DNS rebinding over real HTTP: a server bound to loopback answers only the Host names
nobody else can point at it (issue 24, finding 1); a server bound to 0.0.0.0 answers
the names a LAN reaches it by, and ``server.allowed_hosts`` restricts both."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import msgspec
import pytest

from dragoman.config import ConfigError
from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve

MODELS = "models:\n  - {name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}\n"
FOREIGN = ["evil.example", "127.0.0.1.nip.io", "0x7f000001", "127.1", "2130706433", "localhost.evil.example",
           "10.9.8.7", "EVIL.example."]  # fmt: skip


def lan_address() -> str | None:
    """This machine's own non-loopback IPv4 address (``hostname -I``), if it has one."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((a for a in out if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", a) and not a.startswith("127.")), None)


def chat(server: RunningServer, text: str, host: str | None = None, path: str = "/api/chat") -> httpx.Response:
    body = {"model": "scripted", "stream": False, "messages": [{"role": "user", "content": text}]}
    headers = {"Host": host} if host else {}
    return httpx.post(server.url + path, json=body, headers=headers)


@pytest.fixture(scope="module")
def loopback() -> Iterator[RunningServer]:
    with serve(config_from_yaml(MODELS)) as server:
        yield server


@pytest.mark.parametrize("name", FOREIGN)
def test_a_foreign_host_is_refused_before_any_handler_runs(loopback: RunningServer, name: str) -> None:
    host = f"{name}:{loopback.port}"
    for path in ("/ui/api/config", "/api/tags", "/metrics", "/v1/models", "/"):
        reply = httpx.get(loopback.url + path, headers={"Host": host})
        assert reply.status_code == 403, (path, reply.text)
        assert "server.allowed_hosts" in reply.text and "DNS rebinding" in reply.text, reply.text
    probe = f"probe-{uuid.uuid4().hex}"
    refused = chat(loopback, probe, host)
    assert refused.status_code == 403
    assert refused.json() == {"error": refused.json()["error"]}  # Ollama's shape on an Ollama path
    assert f"add '{name.lower().removesuffix('.')}' to server.allowed_hosts" in refused.json()["error"]
    assert not ScriptedBackend.ran(probe)


def test_the_refusal_comes_in_the_dialect_of_the_path(loopback: RunningServer) -> None:
    headers = {"Host": "evil.example"}
    openai = httpx.post(loopback.url + "/v1/chat/completions", json={}, headers=headers).json()
    assert openai["error"]["code"] == "host_not_allowed" and openai["error"]["type"] == "permission_error"
    anthropic = httpx.post(loopback.url + "/v1/messages", json={}, headers=headers).json()
    assert anthropic["type"] == "error" and anthropic["error"]["type"] == "permission_error"
    ollama = httpx.post(loopback.url + "/api/generate", json={}, headers=headers).json()
    assert set(ollama) == {"error"}
    preflight = httpx.options(loopback.url + "/api/chat", headers={**headers, "Origin": "http://evil.example",
                                                                   "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers


def test_a_host_header_that_is_no_host_is_a_400(loopback: RunningServer) -> None:
    for value in ("a b", "[zz]", "::1", "evil.example:port", "x@127.0.0.1"):
        reply = httpx.get(loopback.url + "/api/tags", headers={"Host": value})
        assert reply.status_code == 400 and "is not a host name and port" in reply.json()["error"], value


@pytest.mark.parametrize(
    "name",
    ["127.0.0.1", "127.0.0.1:{port}", "localhost:{port}", "LocalHost", "localhost.", "app.localhost:{port}",
     "127.5.6.7", "[::1]:{port}", "0.0.0.0:{port}", "{hostname}", "{hostname}:{port}"],
)  # fmt: skip
def test_the_names_that_always_reach_loopback_are_answered(loopback: RunningServer, name: str) -> None:
    host = name.format(port=loopback.port, hostname=socket.gethostname())
    probe = f"probe-{uuid.uuid4().hex}"
    assert chat(loopback, probe, host).status_code == 200
    assert ScriptedBackend.ran(probe)


def test_allowed_hosts_adds_names_domains_and_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_HOSTS", "gw.example, *.lan 10.9.8.7")
    with serve(config_from_yaml('server:\n  allowed_hosts: "${TEST_HOSTS}"\n' + MODELS)) as server:
        for host in ("gw.example", "GW.example:1", "box.lan", "a.b.lan", "10.9.8.7", "localhost"):
            assert httpx.get(server.url + "/api/tags", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", "lan", "gw.example.evil", "10.9.8.6"):
            reply = httpx.get(server.url + "/api/tags", headers={"Host": host})
            assert reply.status_code == 403 and "not allowed" in reply.json()["error"], host


@pytest.mark.parametrize("entry", ["http://gw.example", "gw.example:8080", "gw/x", "[::1]:80", "*x.lan"])
def test_an_allowed_hosts_entry_with_a_scheme_or_port_is_a_config_error(entry: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"'allowed_hosts': '{entry}' is not a host name or address")):
        config_from_yaml(f"server:\n  allowed_hosts: ['{entry}']\n" + MODELS)


@contextmanager
def bound_to_all(allowed_hosts: list[str] | None = None) -> Iterator[RunningServer]:
    config = config_from_yaml(MODELS)
    listed = {"allowed_hosts": allowed_hosts} if allowed_hosts else {}
    server = msgspec.structs.replace(config.server, host="0.0.0.0", **listed)
    with serve(msgspec.structs.replace(config, server=server)) as running:
        yield running


def test_bound_to_all_addresses_the_names_a_lan_uses_are_answered() -> None:
    """Not restricted: a LAN reaches the server by names it cannot know; keys guard it."""
    address = lan_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address (hostname -I)")
    with bound_to_all() as server:
        over_lan = httpx.get(f"http://{address}:{server.port}/api/tags")
        assert over_lan.status_code == 200
        for host in ("gpu-box.lan", f"{address}:{server.port}", "evil.example"):
            assert httpx.get(f"http://{address}:{server.port}/api/tags", headers={"Host": host}).status_code == 200


def test_bound_to_all_addresses_allowed_hosts_restricts_the_names() -> None:
    address = lan_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address (hostname -I)")
    with bound_to_all(["gpu-box.lan"]) as server:
        url = f"http://{address}:{server.port}/api/tags"
        assert httpx.get(url).status_code == 200  # the address the connection arrived on
        assert httpx.get(url, headers={"Host": "gpu-box.lan"}).status_code == 200
        refused = httpx.get(url, headers={"Host": "evil.example"})
        assert refused.status_code == 403 and "it is not in server.allowed_hosts" in refused.json()["error"]


def start(args: list[str], config: Path) -> tuple[subprocess.Popen[str], str, int]:
    """``dragoman serve`` on a free port; its start-up lines up to the serving address."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--port", "0", *args],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines += process.stderr.readline()  # type: ignore[union-attr]
        if (found := re.search(r"on http://\S+:(\d+)", lines)) and "web page at" in lines:
            return process, lines, int(found.group(1))
    process.kill()
    raise AssertionError(f"no start-up line: {lines}")


def stop(process: subprocess.Popen[str]) -> str:
    """What it wrote after :func:`start` read its start-up lines (read through the same
    buffered file: ``communicate(timeout=…)`` reads the pipe itself and loses what the
    buffer already holds)."""
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    return process.stderr.read()  # type: ignore[union-attr]


def wait_served(url: str, **kwargs: object) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        try:
            return httpx.get(url, timeout=2, **kwargs)  # type: ignore[arg-type]
        except httpx.TransportError:
            assert time.monotonic() < deadline, "it does not serve the port it named"
            time.sleep(0.2)


UPSTREAM_ONLY = "models:\n  - {name: remote, backend: openai, base_url: 'http://127.0.0.1:9/v1'}\n"


def test_start_up_warns_when_bound_beyond_loopback_without_keys(tmp_path: Path) -> None:
    config = tmp_path / "open.yaml"
    config.write_text("server:\n  workers: 1\n" + UPSTREAM_ONLY)
    process, lines, port = start(["--host", "0.0.0.0"], config)
    try:
        wait_served(f"http://127.0.0.1:{port}/api/version")
    finally:
        lines += stop(process)
    assert "dragoman: warning: bound to 0.0.0.0, beyond loopback, with no server.api_keys" in lines, lines
    assert "set server.api_keys" in lines and "DNS rebinding" in lines
    keyed = tmp_path / "keyed.yaml"
    keyed.write_text("server:\n  workers: 1\n  api_keys: [k]\n" + UPSTREAM_ONLY)
    process, lines, port = start(["--host", "0.0.0.0"], keyed)
    try:
        wait_served(f"http://127.0.0.1:{port}/api/version")
    finally:
        lines += stop(process)
    assert "warning" not in lines, lines


def test_workers_check_the_host_where_the_supervisor_bound_them(tmp_path: Path) -> None:
    """The file says 0.0.0.0 (unchecked), ``--host 127.0.0.1`` binds loopback: each worker
    process loads the file itself and must still check Host."""
    config = tmp_path / "workers.yaml"
    config.write_text("server:\n  host: 0.0.0.0\n" + UPSTREAM_ONLY)
    process, _lines, port = start(["--host", "127.0.0.1", "--workers", "2"], config)
    try:
        url = f"http://127.0.0.1:{port}/api/version"
        assert wait_served(url).status_code == 200
        for _ in range(6):  # new connections, spread over both workers
            refused = httpx.get(url, headers={"Host": f"evil.example:{port}"})
            assert refused.status_code == 403 and "bound to 127.0.0.1" in refused.json()["error"]
    finally:
        stop(process)


def test_a_star_turns_the_check_off_and_start_up_says_so() -> None:
    from dragoman.proxy.host_check import startup_warnings

    config = config_from_yaml("server:\n  allowed_hosts: ['*']\n" + MODELS)
    assert any("lists '*': the Host check is off" in w for w in startup_warnings(config))
    with serve(config) as server:
        assert httpx.get(server.url + "/api/tags", headers={"Host": "evil.example"}).status_code == 200
    assert startup_warnings(config_from_yaml(MODELS)) == []
