"""Fixtures for building tiny models: one catalogue and one Ollama store per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ollama_store import Store


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dragoman-home")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with pytest.MonkeyPatch.context() as patch:
        root = tmp_path_factory.mktemp("ollama-models")
        patch.setenv("OLLAMA_MODELS", str(root))
        yield Store(root)
