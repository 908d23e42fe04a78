"""Pulling from Hugging Face (``hf:`` names) against a stand-in Hub on 127.0.0.1
(tests/support/hf_endpoint.py, ``HF_ENDPOINT`` pointed at it) serving the default model's
built folder in the published ``*-onnx`` layout (one folder per target) and its GGUF:
through the real server with the official ``ollama`` client, then chatting under the
pulled name; and ``dragoman models pull hf:…``. Nothing reaches the internet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from dragoman.backends.onnx.prepare import catalogue
from dragoman.backends.onnx.prepare.hf_names import HfName, parse
from dragoman.backends.onnx.prepare.pinned_gguf import find_gguf
from dragoman.backends.onnx.prepare.support import PrepareError
from dragoman.proxy.cli import main
from tests.conftest import TEST_HOME
from tests.support.hf_endpoint import Hub, running_hub
from tests.support.server import RunningServer, config_from_yaml, free_port, serve

ONNX_REPO = "test-org/SmolLM2-135M-Instruct-onnx"
GGUF_REPO = "test-org/SmolLM2-135M-Instruct-GGUF"
CPU = "cpu_and_mobile/cpu-int4-rtn-block-32"
CPU_BIGGER = "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4"
CUDA = "cuda/cuda-int4-rtn-block-32"


def onnx_layout(model_dir: Path) -> dict[str, bytes | Path]:
    """The default model's folder three times, as microsoft/Phi-3-mini-4k-instruct-onnx lays
    out its targets: two CPU folders (the second larger) and a CUDA one (its genai_config
    asks for cuda)."""
    files: dict[str, bytes | Path] = {"README.md": b"# SmolLM2 ONNX\n", ".gitattributes": b"*.onnx filter=lfs\n"}
    for folder in (CPU, CPU_BIGGER, CUDA):
        for file in model_dir.iterdir():
            if file.name != catalogue.MARKER:
                files[f"{folder}/{file.name}"] = file
    config = json.loads((model_dir / "genai_config.json").read_text())
    config["model"]["decoder"]["session_options"]["provider_options"] = [{"cuda": {}}]
    files[f"{CUDA}/genai_config.json"] = json.dumps(config, indent=4).encode()
    files[f"{CPU_BIGGER}/extra.bin"] = b"\0" * 4096
    return files


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> Iterator[Hub]:
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))  # never this machine's own cache
    monkeypatch.setenv("HF_TOKEN", "")
    with running_hub() as running:
        running.add(ONNX_REPO, onnx_layout(model_dir))
        running.add(GGUF_REPO, {"SmolLM2-135M-Instruct.Q4_1.gguf": find_gguf(TEST_HOME), "README.md": b"GGUF\n"})
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        yield running


def test_names_are_checked_before_any_request() -> None:
    assert parse("hf:microsoft/Phi-3-mini-4k-instruct-onnx") == HfName("microsoft/Phi-3-mini-4k-instruct-onnx")
    assert parse("hf:org/repo/a/b.gguf").is_gguf and parse("hf:org/repo/cpu/int4").path == "cpu/int4"
    for bad, words in [("hf:org", "hf:ORG/REPO"), ("hf:org/", "not a Hugging Face organisation or repository"),
                       ("hf:-org/repo", "a letter or digit at each end"), ("hf:org/re--po", "no '--'"),
                       ("hf:org/repo/../x.gguf", "not a plain file or folder name"), ("hf:org/repo/a b", "not a plain"),
                       ("hf:" + "o" * 97 + "/r", "at most 96"), ("hf:org/repo/" + "a/" * 200 + "x.gguf", "over 256")]:  # fmt: skip
        with pytest.raises(PrepareError, match=words):
            parse(bad)


@pytest.fixture
def server(hub: Hub) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: "hf:{ONNX_REPO}", backend: onnx, model: "hf:{ONNX_REPO}", provider: cpu, context_length: 1024}}
          - {{name: "smol-gguf", backend: onnx, model: "hf:{GGUF_REPO}/SmolLM2-135M-Instruct.Q4_1.gguf", provider: cpu,
              context_length: 1024}}
        """
    )
    with serve(config) as running:
        yield running


def test_an_onnx_repository_is_pulled_for_the_entry_s_provider_and_answers(server: RunningServer, hub: Hub) -> None:
    client = ollama.Client(host=server.url)
    data = hub.file(ONNX_REPO, f"{CPU}/model.onnx.data")
    hub.drop_once[data.sha256] = 10 << 20  # the connection drops 10 MiB into the weights: resumed with Range
    lines = list(client.pull(f"hf:{ONNX_REPO}", stream=True))
    statuses = [line.status or "" for line in lines]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    assert any(s.startswith(f"pulling the folder {CPU} (cpu, ") and f"another: pull hf:{ONNX_REPO}/{CPU_BIGGER}" in s
               for s in statuses)  # fmt: skip
    weights = [line for line in lines if line.status == f"pulling {CPU}/model.onnx.data"]
    assert {line.digest for line in weights} == {f"sha256:{data.sha256}"} and len(weights) > 10
    assert weights[-1].total == weights[-1].completed == data.size
    assert "verifying sha256 digest" in statuses
    assert any(r.startswith(f"GET /lfs/{data.sha256}") and "(bytes=" in r for r in hub.requests)  # the resumed GET
    # Only the chosen folder's files were fetched; of the others, their genai_config.json alone.
    fetched = {r.split()[1].split("/resolve/")[-1].split("/", 1)[-1] for r in hub.requests if "/resolve/" in r}
    assert {p for p in fetched if not p.startswith(CPU + "/")} == {f"{CPU_BIGGER}/genai_config.json", f"{CUDA}/genai_config.json"}

    reply = client.chat(model=f"hf:{ONNX_REPO}", messages=[{"role": "user", "content": "Say hello."}],
                        options={"num_predict": 8, "temperature": 0})  # fmt: skip
    assert reply.message.content
    build = next(b for b in catalogue.builds() if b.answers_to(f"hf:{ONNX_REPO}"))
    assert build.record.provider == "cpu" and build.record.source.kind == "huggingface"  # type: ignore[union-attr]
    assert catalogue.is_prepared(build.path, verify_hashes=True)
    assert not [p for p in build.path.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_name_the_config_does_not_serve_is_pulled_and_said_how_to_serve(server: RunningServer, hub: Hub) -> None:
    client = ollama.Client(host=server.url)
    lines = list(client.pull(f"hf:{ONNX_REPO}/{CPU_BIGGER}", stream=True))
    assert lines[-1].status == "success"
    assert f"to serve it, add to the config's models: - name: \"hf:{ONNX_REPO}/{CPU_BIGGER}\"" in (lines[-2].status or "")
    assert any(r.endswith(f"{CPU_BIGGER}/extra.bin") for r in hub.requests)
    # Checked before any request: a bad name is a 400 naming the problem.
    asked = len(hub.requests)
    with pytest.raises(ollama.ResponseError) as info:
        client.pull("hf:org/re--po")
    assert info.value.status_code == 400 and "no '--'" in info.value.error and len(hub.requests) == asked
    with pytest.raises(ollama.ResponseError, match="has no repository test-org/missing"):
        list(client.pull("hf:test-org/missing", stream=True))


def test_a_provider_with_no_folder_is_an_error_naming_the_folders(hub: Hub, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", f"hf:{ONNX_REPO}", "--provider", "dml"]) == 1
    error = capsys.readouterr().err
    assert f"no onnxruntime-genai folder for dml in the repository; its folders: {CPU} (cpu), {CPU_BIGGER} (cpu), {CUDA} (cuda)" in error
    assert not any("model.onnx" in r for r in hub.requests)
    assert main(["models", "pull", f"hf:{ONNX_REPO}/{CUDA}"]) == 1
    assert "that folder is for cuda, not cpu; pass --provider cuda" in capsys.readouterr().err
    assert main(["models", "pull", f"hf:{GGUF_REPO}"]) == 1
    assert f"for a GGUF in it, name the file: hf:{GGUF_REPO}/FILE.gguf" in capsys.readouterr().err


def test_a_file_that_differs_from_the_listing_is_deleted(hub: Hub, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hub.corrupt.add(f"{CPU}/model.onnx.data")  # the largest: fetched last
    assert main(["models", "pull", f"hf:{ONNX_REPO}"]) == 1
    assert "digest mismatch: " + f"{CPU}/model.onnx.data of hf:{ONNX_REPO}" in capsys.readouterr().err
    assert catalogue.builds() == [] and not list((tmp_path / "home" / "models").rglob("model.onnx.data"))
    # The next pull keeps what was finished (only the weights are fetched again) and ends with the entry.
    hub.corrupt.clear()
    before = [r for r in hub.requests if r.startswith("GET /lfs/")]
    assert main(["models", "pull", f"hf:{ONNX_REPO}", "--name", "smol-onnx"]) == 0
    out = capsys.readouterr().out
    assert '- name: "smol-onnx"' in out and "provider: cpu" in out
    again = [r for r in hub.requests if r.startswith("GET /lfs/")][len(before):]
    assert len(again) == 1 and hub.file(ONNX_REPO, f"{CPU}/model.onnx.data").sha256 in again[0]
    assert [b.record.names for b in catalogue.builds()] == [["smol-onnx"]]


def test_a_gguf_in_a_repository_is_pulled_then_built(server: RunningServer, hub: Hub) -> None:
    client = ollama.Client(host=server.url, timeout=600)
    gguf = hub.file(GGUF_REPO, "SmolLM2-135M-Instruct.Q4_1.gguf")
    lines = list(client.pull("smol-gguf", stream=True))
    statuses = [line.status or "" for line in lines]
    assert statuses[-1] == "success"
    download = [line for line in lines if line.status == "pulling SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert download[-1].completed == download[-1].total == gguf.size
    built = statuses.index("verifying sha256 digest")
    stages = [line for line in lines[built:] if line.total == 4]  # then the build's stages, as prepare runs them
    assert stages and {line.digest for line in stages} == {f"sha256:{gguf.sha256}"}
    reply = client.generate(model="smol-gguf", prompt="Hi", options={"num_predict": 4, "temperature": 0})
    assert reply.done


def test_an_endpoint_that_cannot_be_reached_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert main(["models", "pull", f"hf:{ONNX_REPO}"]) == 1
    assert "cannot reach http://127.0.0.1:" in capsys.readouterr().err
