"""The default model (SmolLM2-135M-Instruct) prepared from each SOURCE kind — its GGUF
file, a Hugging Face folder made from that GGUF, and an Ollama store holding it as
Ollama lays it out — answers exactly what the default model answers at temperature 0,
each served by the YAML entry ``prepare`` prints. The HF and Ollama variants are built
once per test home (their keys do not change) and reused afterwards."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import ollama
import pytest
import yaml

from dragoman.backends.onnx.prepare import catalogue, find_gguf, prepare
from dragoman.backends.onnx.prepare.entry import yaml_entry
from dragoman.backends.registry import settings_type
from dragoman.config import load_config
from tests.support.ollama_store import SMOLLM2_TEMPLATE, Store
from tests.support.server import RunningServer, config_from_yaml, serve

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def hf_folder(model_home: Path) -> Path:
    """A Hugging Face folder made from the GGUF (as the build's first stage makes one),
    kept in the test home so its content — and so its build key — stays the same."""
    from dragoman.backends.onnx.prepare.worker import convert_gguf

    folder = model_home / "sources" / "SmolLM2-135M-Instruct"
    if not (folder / "model.safetensors").is_file():
        partial = folder.with_name(".partial")
        import shutil

        shutil.rmtree(partial, ignore_errors=True)
        convert_gguf(find_gguf(model_home), partial, [])
        partial.rename(folder)
    return folder


@pytest.fixture(scope="module")
def ollama_store(tmp_path_factory: pytest.TempPathFactory, model_home: Path) -> Iterator[Store]:
    with pytest.MonkeyPatch.context() as patch:
        store = Store(tmp_path_factory.mktemp("ollama-models"))
        patch.setenv("OLLAMA_MODELS", str(store.root))
        store.add_model("smollm2", "135m", find_gguf(model_home), template=SMOLLM2_TEMPLATE,
                        params={"stop": ["<|im_start|>", "<|im_end|>"]}, license="Apache 2.0")  # fmt: skip
        yield store


@pytest.fixture(scope="module")
def builds(model_home: Path, model_dir: Path, hf_folder: Path, ollama_store: Store) -> dict[str, catalogue.Build]:
    return {
        "gguf": prepare(str(find_gguf(model_home)), name="smollm2:135m", home=model_home, progress=False),
        "hf": prepare(str(hf_folder), name="smollm2-hf", home=model_home, progress=False),
        "ollama": prepare("ollama:smollm2:135m", home=model_home, progress=False),
    }


@pytest.fixture(scope="module")
def three_sources(model_home: Path, builds: dict[str, catalogue.Build]) -> Iterator[RunningServer]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAGOMAN_HOME", str(model_home))
        default = load_config(None, settings_type)
        entries = "".join(yaml_entry(b, f"from-{kind}") for kind, b in builds.items())
        config = config_from_yaml(f"models:\n{entries}")
        with serve(msgspec.structs.replace(config, models=[*default.models, *config.models])) as server:
            yield server


def test_the_gguf_source_is_the_default_build(builds: dict[str, catalogue.Build], model_dir: Path) -> None:
    # same file, same options: the key matches and nothing is built again
    assert builds["gguf"].path == model_dir
    assert builds["hf"].path != model_dir and builds["ollama"].path != model_dir
    assert builds["hf"].record.source.kind == "hf"  # type: ignore[union-attr]
    assert builds["ollama"].record.source.kind == "ollama"  # type: ignore[union-attr]
    assert builds["ollama"].record.defaults == {"stop": ["<|im_start|>", "<|im_end|>"]}
    assert builds["ollama"].record.template == "gguf"  # the GGUF's own Jinja, not the Go template


def test_every_source_answers_what_the_default_model_answers(three_sources: RunningServer) -> None:
    client = ollama.Client(host=three_sources.url)
    answers = {
        name: client.chat(model=name, messages=QUESTION, options={"temperature": 0, "num_predict": 24}).message.content
        for name in ("smollm2:135m", "from-gguf", "from-hf", "from-ollama")
    }
    assert "Paris" in answers["smollm2:135m"]
    assert set(answers.values()) == {answers["smollm2:135m"]}, answers


def dragoman(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "DRAGOMAN_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "dragoman.proxy.cli", *args], capture_output=True, text=True, timeout=300, env=env)


def test_prepare_adds_its_entry_to_a_config_and_models_list_shows_the_builds(
    tmp_path: Path, model_home: Path, builds: dict[str, catalogue.Build]
) -> None:
    config = tmp_path / "dragoman.yaml"
    config.write_text("# my models\nserver:\n  port: 11500\nmodels:\n  # the remote one\n  - name: remote\n"
                      "    backend: openai\n    base_url: http://127.0.0.1:8000/v1\naliases:\n  r: remote\n")  # fmt: skip
    result = dragoman("models", "prepare", str(find_gguf(model_home)), "--name", "smol", "--add-to", str(config), home=model_home)
    assert result.returncode == 0, result.stderr
    text = config.read_text()
    assert text.startswith("# my models\nserver:\n  port: 11500\nmodels:\n  # the remote one\n  - name: remote\n")
    assert text.endswith("aliases:\n  r: remote\n")
    data = yaml.safe_load(text)
    assert [m["name"] for m in data["models"]] == ["remote", "smol"]
    assert data["models"][1]["model"] == builds["gguf"].id and data["models"][1]["provider"] == "cpu"
    assert dragoman("config", "check", str(config), home=model_home).returncode == 0
    again = dragoman("models", "prepare", str(find_gguf(model_home)), "--name", "smol", "--add-to", str(config), home=model_home)
    assert again.returncode == 1 and "already has a model named 'smol'" in again.stderr
    listing = dragoman("models", "list", "--config", str(config), home=model_home)
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line.split() for line in listing.stdout.splitlines() if line and not line.startswith(("built", "BUILD"))}
    gguf_row = rows[builds["gguf"].id]
    assert gguf_row[2:5] == ["known:smollm2", "cpu", "int4"] and gguf_row[5:] == ["85.9", "MiB"]  # 86 MB of weights
    assert "smol" in gguf_row[1].split(",")
    assert rows[builds["ollama"].id][2] == "ollama:ollama:smollm2:135m"
    assert rows[builds["hf"].id][2].startswith("hf:")
