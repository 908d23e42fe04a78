"""An upstream model entry is checked when the config is read, naming file and key."""

from __future__ import annotations

import pytest

from dragoman.backends.upstream import UpstreamSettings
from dragoman.config import ConfigError
from tests.support.server import config_from_yaml

BAD = [
    # (name, entry keys, where and words of the error)
    ("neither url", "model: m", "<test>:2: models[0]: give the upstream as either 'base_url' or 'endpoints'"),
    ("both urls", "base_url: http://a\n    endpoints: [http://b]", "either 'base_url' or 'endpoints'"),
    ("not http", "endpoints: [http://a, gpu-box:8000]", "'gpu-box:8000' must start with http://"),
    ("zero timeout", "base_url: http://a\n    idle_timeout: 0", "'idle_timeout' must be a positive"),
    ("no failures allowed", "base_url: http://a\n    max_failures: 0", "at least 1"),
    ("misspelt key", "base_url: http://a\n    first_bite_timeout: 3", "<test>:5: models[0].first_bite_timeout: unknown key"),
    ("wrong type", "base_url: http://a\n    endpoints: http://b", "<test>:5: models[0].endpoints: Expected a list"),
    ("tiny reply cap", "base_url: http://a\n    max_reply_bytes: 10", "'max_reply_bytes' and 'max_line_bytes' must be at least 1024"),
    ("url credentials and a key", "base_url: http://u:p@a\n    api_key: k", "carries credentials (user:password@) and 'api_key'"),
]


@pytest.mark.parametrize(("name", "keys", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_entries_are_refused(name: str, keys: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_yaml(f"models:\n  - name: m\n    backend: openai\n    {keys}\n")
    assert words in str(caught.value)


def test_endpoints_and_the_one_endpoint_spelling() -> None:
    config = config_from_yaml(
        """\
        models:
          - {name: a, backend: openai, base_url: "http://one:8000/v1/"}
          - {name: b, backend: ollama, endpoints: ["http://x:11434", "http://y:11434/"]}
        """
    )
    assert [route.settings.urls for route in config.models] == [["http://one:8000/v1"], ["http://x:11434", "http://y:11434"]]


def test_repr_never_shows_the_key() -> None:
    settings = UpstreamSettings(base_url="http://a", api_key="sk-live-123456")
    assert "sk-live-123456" not in repr(settings) and "api_key='***'" in repr(settings)
    assert "sk-live-123456" not in repr(settings.secret_key)


def test_the_repr_shows_no_credentials() -> None:
    shown = repr(UpstreamSettings(endpoints=["http://user:hunter2@a:1/v1", "http://b"]))
    assert "hunter2" not in shown and "user" not in shown and "http://a:1/v1" in shown
    keyed = repr(UpstreamSettings(base_url="http://a/v1", api_key="sk-secret"))
    assert "sk-secret" not in keyed and "api_key='***'" in keyed
