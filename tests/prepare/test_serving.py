"""A built model served by name (``model:`` in a config entry) through the real server,
with the entry's system prompt, and what happens when the name is not built."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from dragoman.backends.onnx.prepare import prepare
from tests.prepare.tiny_models import make_tiny
from dragoman.backends.onnx.prepare.support import sha256_file
from tests.support.ollama_store import Store
from tests.support.server import RunningServer, config_from_yaml, serve


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory, home: Path, store: Store) -> Iterator[RunningServer]:
    # Gemma 3's sliding window (128) is longer than these requests: the KV cache must still hold it.
    tiny = make_tiny("gemma3", tmp_path_factory.mktemp("gemma3"))
    build = prepare(str(tiny.hf_dir), name="tiny-gemma3", precision="int4", home=home, progress=False)
    assert build.record.name == "tiny-gemma3"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAGOMAN_HOME", str(home))
        config = config_from_yaml(f"""
            models:
              - {{name: plain, backend: onnx, model: tiny-gemma3, provider: cpu}}
              - {{name: by-folder, backend: onnx, model: {build.id}, provider: cpu}}
              - {{name: with-system, backend: onnx, model: tiny-gemma3, provider: cpu, system: "You are a helpful assistant."}}
              - {{name: missing, backend: onnx, model: not-built-yet, provider: cpu}}
              - {{name: pulled, backend: onnx, model: "tiny-llama:latest", provider: cpu}}
        """)
        with serve(config) as server:
            yield server


def chat(server: RunningServer, model: str, messages: list[dict[str, str]]) -> ollama.ChatResponse:
    client = ollama.Client(host=server.url)
    return client.chat(model=model, messages=messages, options={"temperature": 0, "num_predict": 3})


def test_a_built_model_answers_by_its_name_and_by_its_folder(tiny_server: RunningServer) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    first = chat(tiny_server, "plain", question)
    assert first.done_reason == "length" and first.eval_count == 3
    assert chat(tiny_server, "by-folder", question).message.content == first.message.content


def test_the_entry_system_prompt_opens_the_conversation(tiny_server: RunningServer) -> None:
    user = {"role": "user", "content": "Hello"}
    system = {"role": "system", "content": "You are a helpful assistant."}
    implicit = chat(tiny_server, "with-system", [user])
    explicit = chat(tiny_server, "plain", [system, user])
    assert implicit.prompt_eval_count == explicit.prompt_eval_count > chat(tiny_server, "plain", [user]).prompt_eval_count
    assert implicit.message.content == explicit.message.content
    # a request with its own system message keeps it (Ollama's rule)
    own = chat(tiny_server, "with-system", [{"role": "system", "content": "Be brief."}, user])
    assert own.prompt_eval_count == chat(tiny_server, "plain", [{"role": "system", "content": "Be brief."}, user]).prompt_eval_count


def test_a_name_that_is_not_built_is_a_404_naming_the_command(tiny_server: RunningServer) -> None:
    reply = httpx.post(f"{tiny_server.url}/api/chat", json={"model": "missing", "stream": False,
                                                          "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert reply.status_code == 404
    assert "no model named 'not-built-yet'" in reply.json()["error"] and "dragoman models prepare" in reply.json()["error"]
    ready = httpx.get(f"{tiny_server.url}/health/ready").json()
    assert "not-built-yet" in str(ready)


async def test_a_build_from_a_server_reports_its_progress(tmp_path: Path) -> None:
    """What /api/pull calls: the build in a child process, every stage and bar update reported."""
    from dragoman.backends.onnx.prepare.background import BuildProgress, prepare_in_background
    from dragoman.backends.onnx.prepare.support import PrepareError

    tiny = make_tiny("qwen2", tmp_path / "src")
    events: list[BuildProgress] = []
    build = await prepare_in_background(str(tiny.gguf), name="tiny-qwen", precision="fp32", home=tmp_path / "home",
                                        on_progress=events.append)  # fmt: skip
    assert build.record.name == "tiny-qwen" and build.path.parent == tmp_path / "home" / "models"
    stages = [e.stage for e in events if e.stage is not None]
    assert stages == sorted(stages) and set(stages) == {1, 2, 3, 4}
    bars = [e for e in events if e.total]
    assert bars and bars[-1].completed == bars[-1].total
    assert any("ready" in e.status for e in events)
    with pytest.raises(PrepareError, match="is not a GGUF file, a Hugging Face folder"):
        await prepare_in_background(str(tmp_path / "nothing"), home=tmp_path / "home")


def test_pulling_an_ollama_name_builds_it_with_ollama_s_progress(
    tiny_server: RunningServer, store: Store, tmp_path: Path
) -> None:
    tiny = make_tiny("qwen2", tmp_path)
    store.add_model("tiny-qwen2", "latest", tiny.gguf, template="{{ .Prompt }}", params={"stop": ["<|im_end|>"]})
    client = ollama.Client(host=tiny_server.url, timeout=300)
    steps = list(client.pull("ollama:tiny-qwen2", stream=True))
    assert steps[0].status == "pulling manifest" and steps[-1].status == "success"
    verifying = [s for s in steps if s.status.startswith("verifying")]  # the blob hashed first, in bytes
    stages = [s for s in steps if s.total and s not in verifying]
    assert [s.completed for s in stages] == [0, 1, 2, 3, 4] and {s.total for s in stages} == {4}
    assert {s.digest for s in stages} == {s.digest for s in verifying} == {f"sha256:{sha256_file(tiny.gguf)}"}
    assert verifying[-1].completed == verifying[-1].total == tiny.gguf.stat().st_size
    assert "built tiny-qwen2-latest-int4-cpu; to serve it" in steps[-2].status and "model: tiny-qwen2-latest-int4-cpu" in steps[-2].status
    with pytest.raises(ollama.ResponseError) as info:  # not in the store: nothing to build
        list(client.pull("ollama:not-there", stream=True))
    assert info.value.status_code == 404


def test_pulling_an_entry_whose_model_is_not_built_builds_it_from_the_ollama_store(
    tiny_server: RunningServer, store: Store, tmp_path: Path
) -> None:
    tiny = make_tiny("llama", tmp_path)
    with pytest.raises(ollama.ResponseError) as info:  # not in the store yet: a 404 naming the command
        chat(tiny_server, "pulled", [{"role": "user", "content": "hi"}])
    assert info.value.status_code == 404 and "dragoman models prepare" in info.value.error
    store.add_model("tiny-llama", "latest", tiny.gguf)
    client = ollama.Client(host=tiny_server.url, timeout=300)
    assert client.pull("pulled").status == "success"
    assert chat(tiny_server, "pulled", [{"role": "user", "content": "hi"}]).eval_count == 3
