"""The ``dragoman`` command as a user runs it."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serve_process import dragoman_serve


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
    with dragoman_serve(config, "--host", host, "--workers", str(workers)) as served:
        shown = f"[{host}]" if ":" in host else host
        found = re.search(rf"on http://{re.escape(shown)}:(\d+)", served.lines[0])
        assert found, served.lines[0]
        assert served.url == f"http://{shown}:{found.group(1)}"  # and it answered there
        assert int(found.group(1)) not in (0, 11434), served.lines[0]


def test_serve_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    config = tmp_path / "upstream.yaml"
    config.write_text("models:\n  - {name: remote, backend: openai, base_url: 'http://127.0.0.1:9/v1'}\n")
    result = dragoman("serve", "--config", str(config), "--port", "70000")
    assert result.returncode == 2 and "--port must be a port number, 0 to 65535" in result.stderr
    assert "Traceback" not in result.stderr
