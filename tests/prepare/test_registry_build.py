"""A model pulled by name through the real server (the official ``ollama`` client, over
HTTP) from a stand-in Ollama registry serving the default model's GGUF, built as
``prepare`` builds it, then answering chat under its Ollama name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from dragoman.backends.onnx.prepare.pinned_gguf import find_gguf
from tests.conftest import TEST_HOME
from tests.support.ollama_registry import Registry, running_registry
from tests.support.server import RunningServer, config_from_yaml, serve

MODEL = "application/vnd.ollama.image.model"


@pytest.fixture
def pulled_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunningServer, Registry, Path]]:
    gguf = find_gguf(TEST_HOME)
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path / "home"))  # the builds, and the pulled store
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "no-ollama"))  # this machine's own store is not read
    with running_registry() as registry:
        registry.add("library/tiny:latest", [
            (MODEL, gguf),
            ("application/vnd.ollama.image.params", json.dumps({"stop": ["<|im_end|>"], "temperature": 0.2}).encode()),
            ("application/vnd.ollama.image.license", b"Apache-2.0"),
        ])  # fmt: skip
        registry.add("library/junk:latest", [(MODEL, b"not a GGUF" * 1000)])
        config = config_from_yaml(
            f"""\
            server: {{registry: "{registry.url}"}}
            models:
              - {{name: "tiny:latest", backend: onnx, model: "tiny:latest", provider: cpu, context_length: 1024}}
            """
        )
        with serve(config) as server:
            yield server, registry, gguf


def test_a_model_pulled_by_name_is_built_and_answers_under_it(pulled_server: tuple[RunningServer, Registry, Path]) -> None:
    server, registry, gguf = pulled_server
    client = ollama.Client(host=server.url)
    lines = list(client.pull("tiny:latest", stream=True))
    statuses = [line.status or "" for line in lines]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    digest = next(d for d in registry.blobs if registry.blobs[d].data == gguf)
    download = [line for line in lines if line.digest == digest and (line.status or "").startswith("pulling ")]
    assert {line.status for line in download} == {f"pulling {digest[7:19]}"}
    assert download[-1].total == download[-1].completed == gguf.stat().st_size and len(download) > 10
    assert statuses.index("verifying sha256 digest") < statuses.index("writing manifest")
    assert any("int4" in s for s in statuses[statuses.index("writing manifest"):])  # then built as prepare builds
    reply = client.chat(model="tiny:latest", messages=[{"role": "user", "content": "Say hello."}],
                        options={"num_predict": 8, "temperature": 0})  # fmt: skip
    assert reply.message.content
    # A name the config does not serve is pulled too; bytes that are no GGUF stop at the build, saying so.
    with pytest.raises(ollama.ResponseError, match="GGUF"):
        list(client.pull("junk", stream=True))
    assert any(r.startswith("GET /v2/library/junk/manifests/latest") for r in registry.requests)
