"""The README's two commands are the ones CI and users run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", section)


def test_readme_has_exactly_two_setup_commands() -> None:
    serve, test = readme_commands()
    assert serve.endswith("dragoman serve")
    assert "pytest" in test


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()


def test_readme_config_reference_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented config is a real one: every key in it exists."""
    from backends.registry import settings_type
    from config import parse_config

    text = (ROOT / "README.md").read_text()
    section = text.split("## Configuration reference", 1)[1]
    example = re.search(r"```yaml\n(.+?)\n```", section, re.S).group(1)
    (tmp_path / "keys.txt").write_text("k1\n")
    monkeypatch.setenv("UPSTREAM_KEY", "secret")
    monkeypatch.delenv("DRAGOMAN_API_KEYS", raising=False)
    config = parse_config(example, str(tmp_path / "dragoman.yaml"), settings_type)
    assert [m.config.name for m in config.models] == ["smollm2:135m", "remote-model", "llama*"]
    assert config.api_keys == ["k1"]


def test_every_whole_config_in_the_readme_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.registry import settings_type
    from config import parse_config

    monkeypatch.setenv("UPSTREAM_KEY", "secret")
    (tmp_path / "keys.txt").write_text("k1\n")
    blocks = [b for b in re.findall(r"```yaml\n(.+?)\n```", (ROOT / "README.md").read_text(), re.S)
              if b.startswith(("models:", "server:"))]
    assert len(blocks) >= 2
    for block in blocks:
        assert parse_config(block, str(tmp_path / "c.yaml"), settings_type).models
