"""The ``dragoman`` command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def dragoman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy.cli", *args], capture_output=True, text=True, timeout=60)


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
    from backends.onnx import providers
    from proxy import cli

    monkeypatch.setattr(providers, "installed_flavours", lambda: {"onnxruntime-genai": "0.18.0", "onnxruntime-genai-cuda": "0.18.0"})
    monkeypatch.setattr("backends.onnx.backend.installed_flavours", providers.installed_flavours)
    monkeypatch.setattr(cli, "configure_logging", lambda *args: None)
    assert cli.main(["serve", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "cannot start" in err and "pip uninstall -y" in err and "onnxruntime-genai" in err
