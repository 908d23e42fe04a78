"""Shared fixtures: real servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from dragoman.backends.onnx.prepare import default_model_path, prepare_smollm2
from dragoman.backends.registry import settings_type
from dragoman.config import load_config
from tests.support.fim_model import build_fim_model
from tests.support.markers import holds_no_unit_test, mark
from tests.support.server import RunningServer, config_from_yaml, serve

pytest_plugins = ["tests.support.isolation"]

SCRIPTED_CONFIG = """\
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
    defaults: {temperature: 0.3}
  - name: "family-*"
    backend: tests.support.scripted:ScriptedBackend
  - name: no-tools
    backend: tests.support.scripted:ScriptedBackend
    tools: false
aliases:
  nickname: scripted
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``unit`` and ``real_model`` markers from what each test uses (tests/support/markers.py)."""
    mark(items)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m unit`` does not import the modules that can hold no unit test (the clients,
    browsers and fuzzers they import take most of the collection time)."""
    return True if config.getoption("markexpr") == "unit" and holds_no_unit_test(collection_path) else None


@pytest.fixture(scope="session")
def scripted_server() -> Iterator[RunningServer]:
    """dragoman with the test-only scripted backend, for failure paths."""
    with serve(config_from_yaml(SCRIPTED_CONFIG)) as server:
        yield server


TEST_HOME = Path(__file__).resolve().parents[1] / ".dragoman-test-home"


@pytest.fixture(scope="session")
def model_home() -> Path:
    """The real default model, built once into a git-ignored home and reused."""
    prepare_smollm2("cpu", home=TEST_HOME, progress=False)
    return TEST_HOME


@pytest.fixture(scope="session")
def model_dir(model_home: Path) -> Path:
    return default_model_path("cpu", model_home)


@pytest.fixture(scope="session")
def real_server(model_home: Path, embedding_model_dir: Path) -> Iterator[RunningServer]:
    """The built-in default config (served as `dragoman serve` serves it), plus an alias."""
    with pytest.MonkeyPatch.context() as patch:  # the default config names ${DRAGOMAN_HOME}
        patch.setenv("DRAGOMAN_HOME", str(model_home))
        config = load_config(None, settings_type)
    config = msgspec.structs.replace(config, aliases={**config.aliases, "gpt-4o-mini": "smollm2:135m"})
    with serve(config) as server:
        yield server


@pytest.fixture(scope="session")
def embedding_model_dir() -> Path:
    """all-MiniLM-L6-v2 exported to ONNX (and checked against PyTorch) once into the test home."""
    from dragoman.backends.onnx.embeddings.build import prepare_all_minilm

    return prepare_all_minilm(TEST_HOME, progress=False)


@pytest.fixture(scope="session")
def fim_model_dir(model_dir: Path) -> Path:
    """The default model with fill-in-the-middle tokens in its tokenizer (see
    tests/support/fim_model.py), beside it in the git-ignored test home."""
    return build_fim_model(model_dir, model_dir.parent / "smollm2-135m-fim-test")


@pytest.fixture(scope="session")
def fim_server(fim_model_dir: Path) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: "fim:test", backend: onnx, path: "{fim_model_dir}", provider: cpu, context_length: 1024,
              defaults: {{stop: ["<|endoftext|>", "END"], temperature: 0.2}}}}
        """
    )
    with serve(config) as server:
        yield server
