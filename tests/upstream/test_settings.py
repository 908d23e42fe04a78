"""An upstream model entry is checked when the config is read, naming file and key."""

from __future__ import annotations

import pytest

from backends.upstream import UpstreamSettings
from config import ConfigError
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
