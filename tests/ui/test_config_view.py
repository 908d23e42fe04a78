"""What the page shows of the config: the routing table and masked settings."""

from __future__ import annotations

import msgspec
import pytest

from dragoman.config import check_report
from dragoman.proxy.ui.config_view import MASK, answers_from, config_view, masked, masked_url
from tests.support.server import config_from_yaml

SECRET = "sk-very-secret-upstream-key"
CONFIG = f"""\
server:
  api_keys: [client-key-one, client-key-two]
models:
  - name: remote
    backend: openai
    base_url: "https://api.example.com/v1?api-key=qwerty&region=eu"
    api_key: {SECRET}
  - name: basic
    backend: openai
    base_url: "https://user:hunter2@basic.example.com/v1"
  - name: "llama*"
    backend: ollama
    endpoints: ["http://127.0.0.1:11435", "http://127.0.0.1:11436"]
    forward_auth: true
aliases:
  gpt-4o-mini: remote
  fast: remote
"""


@pytest.mark.parametrize(
    ("value", "key", "expected"),
    [
        ("plain", "model", "plain"),
        ("sk-1", "api_key", MASK),
        ("sk-1", "API_KEY", MASK),
        ("Bearer x", "Authorization", MASK),
        ("abc", "x-goog-api-key", MASK),
        ("abc", "access_token", MASK),
        ("abc", "client_secret", MASK),
        ("", "api_key", ""),  # nothing to hide, and "not set" stays visible
        (None, "api_key", None),
        (True, "forward_auth", True),  # not a string: a switch, not a secret
        ({"headers": {"Authorization": "Bearer x", "Accept": "json"}}, "", {"headers": {"Authorization": MASK, "Accept": "json"}}),
        (["http://u:p@h:1/v1", "http://h:2"], "endpoints", ["http://h:1/v1", "http://h:2"]),
        ("~/models/x", "path", "~/models/x"),
    ],
)
def test_masked(value: object, key: str, expected: object) -> None:
    assert masked(value, key) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://user:pass@host/v1", "https://host/v1"),
        ("https://host/v1?key=abc&x=1", "https://host/v1?key=***&x=***"),
        ("not a url", "not a url"),
        ("http://[::1/broken", MASK),  # unparseable: say nothing rather than something secret
    ],
)
def test_masked_url(url: str, expected: str) -> None:
    assert masked_url(url) == expected


def test_config_view_never_contains_a_secret() -> None:
    config = config_from_yaml(CONFIG)
    view = config_view(config)
    text = msgspec.json.encode(view).decode()
    for secret in (SECRET, "hunter2", "qwerty", "client-key-one", "client-key-two"):
        assert secret not in text
    assert view.api_keys is True
    assert view.server["api_keys"] == MASK
    assert view.check == check_report(config)
    remote, basic, llama = view.entries
    assert basic.answers_from == ["https://basic.example.com/v1"]
    assert remote.settings["api_key"] == MASK
    assert remote.answers_from == ["https://api.example.com/v1?api-key=***&region=***"]
    assert sorted(remote.aliases) == ["fast", "gpt-4o-mini"]
    assert (llama.match, llama.answers_from) == ("pattern", ["http://127.0.0.1:11435", "http://127.0.0.1:11436"])
    assert llama.settings["forward_auth"] is True


def test_check_report_is_what_config_check_prints() -> None:
    lines = check_report(config_from_yaml(CONFIG))
    assert lines[0] == "<test>: OK, 3 model entries, 2 aliases"
    assert lines[1].split() == ["NAME", "BACKEND", "MATCH"]
    assert [line.split() for line in lines[2:]] == [
        ["remote", "openai", "exact"],
        ["basic", "openai", "exact"],
        ["llama*", "ollama", "pattern"],
        ["gpt-4o-mini", "openai", "alias", "of", "remote"],
        ["fast", "openai", "alias", "of", "remote"],
    ]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"endpoints": ["http://a", "http://b"], "base_url": None}, ["http://a", "http://b"]),
        ({"endpoints": [], "base_url": "http://a"}, ["http://a"]),
        ({"path": "/models/x.gguf"}, ["/models/x.gguf"]),
        ({"path": None}, []),
        ({}, []),
    ],
)
def test_answers_from(settings: dict[str, object], expected: list[str]) -> None:
    assert answers_from(settings) == expected
