"""The ``dragoman`` command as a user runs it."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def dragoman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dragoman.proxy.cli", *args], capture_output=True, text=True, timeout=60)


def test_config_check_prints_routing_table(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(
        "models:\n"
        "  - {name: remote, backend: openai, base_url: 'http://127.0.0.1:8000/v1'}\n"
        "  - {name: 'llama*', backend: ollama, base_url: 'http://127.0.0.1:11435'}\n"
        "aliases:\n  gpt-4o-mini: remote\n"
    )
    result = dragoman("config", "check", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "OK, 2 model entries, 1 aliases" in lines[0]
    assert lines[2].split() == ["remote", "openai", "exact"]
    assert lines[3].split() == ["llama*", "ollama", "pattern"]
    assert lines[4].split() == ["gpt-4o-mini", "openai", "alias", "of", "remote"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models:\n  - name: a\n    backend: openai\n    base_url: http://x\n    api_kee: k\n", ":5: models[0].api_kee: unknown key 'api_kee'"),
        ("server:\n  port: many\nmodels: []\n", ":2: server.port: Expected `int`, got `str`"),
        ("server:\n  port: 70000\nmodels: []\n", ":2: server.port: Expected `int` <= 65535"),
    ],
)
def test_config_check_names_line_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    result = dragoman("config", "check", str(path))
    assert result.returncode == 2
    assert f"{path}{expected}" in result.stderr
    assert "Traceback" not in result.stderr


def test_models_list_default_config() -> None:
    result = dragoman("models", "list")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].split("\t") == ["smollm2:135m", "onnx", "exact"]


def test_serve_refuses_two_onnxruntime_genai_flavours(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from dragoman.backends.onnx import providers
    from dragoman.proxy import cli

    monkeypatch.setattr(providers, "installed_flavours", lambda: {"onnxruntime-genai": "0.18.0", "onnxruntime-genai-cuda": "0.18.0"})
    monkeypatch.setattr(cli, "configure_logging", lambda *args: None)
    assert cli.main(["serve", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "cannot start" in err and "pip uninstall -y" in err and "onnxruntime-genai" in err


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize(("host", "workers"), [("127.0.0.1", 1), ("127.0.0.1", 2), ("::1", 2)])
def test_serve_on_port_0_takes_a_free_port_and_says_which(tmp_path: Path, host: str, workers: int) -> None:
    """``--port 0`` is how scripts and test harnesses ask for any free port: it was
    taken for "not given" (the config's 11434 was served instead), and with several
    workers the start-up line said ``:0``."""
    if host == "::1" and not ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    config = tmp_path / "upstream.yaml"
    config.write_text("models:\n  - {name: remote, backend: openai, base_url: 'http://127.0.0.1:9/v1'}\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--host", host, "--port", "0",
         "--workers", str(workers)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = server.stderr.readline()  # type: ignore[union-attr]
        shown = f"[{host}]" if ":" in host else host
        found = re.search(rf"on http://{re.escape(shown)}:(\d+)", line)
        assert found, line
        port = int(found.group(1))
        assert port not in (0, 11434), line
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"http://{shown}:{port}/api/version", timeout=2).status_code == 200
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, "it does not serve the port it named"
                time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_serve_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    config = tmp_path / "upstream.yaml"
    config.write_text("models:\n  - {name: remote, backend: openai, base_url: 'http://127.0.0.1:9/v1'}\n")
    result = dragoman("serve", "--config", str(config), "--port", "70000")
    assert result.returncode == 2 and "--port must be a port number, 0 to 65535" in result.stderr
    assert "Traceback" not in result.stderr
