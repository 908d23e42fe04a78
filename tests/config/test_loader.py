"""Config decoding: the documented shape works, and every mistake names line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import msgspec
import pytest

from dragoman.config import ConfigError, parse_config, resolve, routing_table
from dragoman.config.loader import DEFAULT_CONFIG, load_config


class PathSettings(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    provider: str = "auto"


class UrlSettings(msgspec.Struct, forbid_unknown_fields=True):
    base_url: str
    model: str | None = None
    api_key: str | None = None


SETTINGS = {"local": PathSettings, "remote": UrlSettings}


def settings_for(name: str) -> type[msgspec.Struct]:
    if name not in SETTINGS:
        raise KeyError(f"unknown backend '{name}'; known backends: local, remote")
    return SETTINGS[name]


def parse(text: str) -> object:
    return parse_config(textwrap.dedent(text), "test.yaml", settings_for)


GOOD = """\
server:
  host: 127.0.0.1
  port: 11500
models:
  - name: small
    backend: local
    path: ~/models/small
    defaults: {temperature: 0.2, stop: ["</s>"]}
    keep_alive: 10m
  - name: remote-model
    backend: remote
    base_url: http://127.0.0.1:8000/v1
    model: name-upstream-knows
    api_key: ${DRAGOMAN_TEST_KEY}
  - name: "llama*"
    backend: remote
    base_url: http://127.0.0.1:11435
aliases:
  gpt-4o-mini: small
"""


def test_documented_shape_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAGOMAN_TEST_KEY", "sekret")
    config = parse(GOOD)
    assert config.server.port == 11500
    small, remote, llama = config.models
    assert small.settings == PathSettings(path="~/models/small")
    assert small.config.defaults.temperature == 0.2
    assert small.config.defaults.stop == ["</s>"]
    assert small.keep_alive == 600.0
    assert remote.settings.api_key == "sekret"
    assert remote.keep_alive == 300.0  # default, as Ollama's 5m
    assert llama.config.is_pattern


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("small", "small"),  # exact
        ("gpt-4o-mini", "small"),  # alias
        ("llama3.2:1b", "llama*"),  # glob
        ("remote-model", "remote-model"),
        ("mistral", None),
        ("small:latest", "small"),  # Ollama's implicit tag
        ("gpt-4o-mini:latest", "small"),
        ("small:7b", None),
    ],
)
def test_routing(monkeypatch: pytest.MonkeyPatch, name: str, want: str | None) -> None:
    monkeypatch.setenv("DRAGOMAN_TEST_KEY", "k")
    route = resolve(parse(GOOD), name)
    assert (route.config.name if route else None) == want


def test_untagged_name_finds_a_latest_entry() -> None:
    config = parse("models:\n  - {name: 'qwen:latest', backend: remote, base_url: http://a}\n")
    assert resolve(config, "qwen").config.name == "qwen:latest"


def test_exact_name_beats_an_earlier_pattern() -> None:
    config = parse(
        """\
        models:
          - {name: "ll*", backend: remote, base_url: http://a}
          - {name: llama, backend: remote, base_url: http://b}
        """
    )
    assert resolve(config, "llama").settings.base_url == "http://b"
    assert resolve(config, "llx").settings.base_url == "http://a"


def test_routing_table_lists_entries_and_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAGOMAN_TEST_KEY", "k")
    assert routing_table(parse(GOOD)) == [
        ("small", "local", "exact"),
        ("remote-model", "remote", "exact"),
        ("llama*", "remote", "pattern"),
        ("gpt-4o-mini", "local", "alias of small"),
    ]


def test_env_fallback_syntax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRAGOMAN_UNSET_VAR", raising=False)
    config = parse(
        """\
        models:
          - {name: m, backend: local, path: "${DRAGOMAN_UNSET_VAR:-/opt/m}/x"}
        """
    )
    assert config.models[0].settings.path == "/opt/m/x"


BROKEN = [
    # (case, yaml, expected fragments of the message)
    (
        "unknown top-level key",
        "serverr:\n  port: 1\nmodels: []\n",
        ["test.yaml:1:", "serverr", "unknown key"],
    ),
    (
        "wrong type for port",
        "server:\n  host: 127.0.0.1\n  port: eleven\nmodels: []\n",
        ["test.yaml:3:", "server.port", "Expected `int`, got `str`"],
    ),
    (
        "backend setting misspelled",
        "models:\n  - name: a\n    backend: local\n    path: /m\n    provder: cpu\n",
        ["test.yaml:5:", "models[0].provder", "unknown key 'provder'"],
    ),
    (
        "missing required backend setting",
        "models:\n  - name: a\n    backend: remote\n",
        ["test.yaml:2:", "models[0]", "base_url"],
    ),
    (
        "unknown backend",
        "models:\n  - name: a\n    backend: nope\n",
        ["test.yaml:3:", "models[0].backend", "unknown backend 'nope'"],
    ),
    (
        "bad sampling default",
        "models:\n  - name: a\n    backend: local\n    path: /m\n    defaults:\n      temperature: hot\n",
        ["test.yaml:6:", "models[0].defaults.temperature", "Expected `float | null`"],
    ),
    (
        "unknown sampling default",
        "models:\n  - name: a\n    backend: local\n    path: /m\n    defaults:\n      temprature: 1\n",
        ["test.yaml:6:", "models[0].defaults.temprature", "unknown key"],
    ),
    (
        "keep_alive without unit",
        "models:\n  - name: a\n    backend: local\n    path: /m\n    keep_alive: '10'\n",
        ["test.yaml:5:", "models[0].keep_alive", "no unit"],
    ),
    (
        "alias to nothing",
        "models:\n  - {name: a, backend: local, path: /m}\naliases:\n  b: c\n",
        ["test.yaml:4:", "aliases.b", "not a model name"],
    ),
    (
        "duplicate model name",
        "models:\n  - {name: a, backend: local, path: /m}\n  - {name: a, backend: local, path: /n}\n",
        ["test.yaml:3:", "models[1].name", "defined twice"],
    ),
    (
        "duplicate key",
        "server:\n  port: 1\n  port: 2\nmodels: []\n",
        ["test.yaml:3:", "duplicate key 'port'"],
    ),
    (
        "invalid yaml",
        "models:\n  - name: [a\n",
        ["test.yaml:3:", "not valid YAML"],
    ),
    (
        "unset environment variable",
        "models:\n  - name: a\n    backend: local\n    path: ${DRAGOMAN_SURELY_UNSET}\n",
        ["test.yaml:4:", "DRAGOMAN_SURELY_UNSET is not set"],
    ),
    ("empty file", "", ["test.yaml:", "empty"]),
    (
        "model entry not a mapping",
        "models:\n  - just-a-name\n",
        ["test.yaml:2:", "models[0]", "mapping"],
    ),
]


@pytest.mark.parametrize(("case", "text", "fragments"), BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_config_names_line_and_key(case: str, text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "test.yaml", settings_for)
    for fragment in fragments:
        assert fragment in str(info.value), f"{case}: {fragment!r} not in {info.value}"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml", settings_for)


def test_builtin_default_config_serves_smollm2() -> None:
    from dragoman.backends.registry import settings_type

    config = load_config(None, settings_type)
    assert config.source == str(DEFAULT_CONFIG)
    assert resolve(config, "smollm2:135m").config.backend == "onnx"


def test_image_fetch_bounds_are_checked() -> None:
    from dragoman.backends.registry import settings_type

    with pytest.raises(ConfigError, match=r"server.image_fetch: 'max_concurrent' and 'max_bytes' must be at least 1"):
        parse_config("server:\n  image_fetch: {enabled: true, max_concurrent: 0}\nmodels: []\n", "c.yaml", settings_type)
