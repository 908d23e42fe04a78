"""Ollama's model management against a gateway whose models come from a YAML file:
``/api/pull`` makes a served model ready (building the default model, with progress
in Ollama's pull shape), and the endpoints that would change what a server holds say
that the config file does that (501), with the official ``ollama`` client."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import ollama
import pytest

from dragoman.backends.onnx.prepare import GGUF_SHA256, PrepareError, default_model_path, prepare_in_subprocess
from dragoman.backends.pull import PullProgress, stage_progress
from dragoman.proxy import model_admin_routes
from tests.support.server import RunningServer, config_from_yaml, serve


@pytest.fixture(scope="module")
def ol(real_server: RunningServer) -> ollama.Client:
    return ollama.Client(host=real_server.url)


def test_pulling_a_served_model(ol: ollama.Client, real_server: RunningServer) -> None:
    assert ol.pull("smollm2:135m").status == "success"
    steps = [p.status for p in ol.pull("smollm2", stream=True)]  # an alias
    assert steps[0] == "pulling manifest" and steps[-1] == "success"
    assert any("is ready in" in s for s in steps)
    with httpx.stream("POST", real_server.url + "/api/pull", json={"name": "smollm2:135m"}) as reply:
        assert reply.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in reply.iter_lines()]
    assert all(set(line) <= {"status", "digest", "total", "completed"} for line in lines)


def test_pulling_a_name_the_config_does_not_serve(ol: ollama.Client) -> None:
    for stream in (False, True):
        with pytest.raises(ollama.ResponseError) as info:
            result = ol.pull("llama3.2:1b", stream=stream)
            list(result) if stream else None  # type: ignore[call-overload]
        assert info.value.status_code == 404
        assert "not served here" in info.value.error and "config" in info.value.error and "GET /api/tags" in info.value.error
        # One sentence, not wrapped again in "model '…' not found".
        assert info.value.error.startswith("pull model manifest: model 'llama3.2:1b' is not served here")
        assert not info.value.error.endswith("not found")
        assert "pulls from a registry are off (server.registry is empty)" in info.value.error  # the tests' servers


ADMIN = [
    ("POST", "/api/create", {"model": "mine", "from": "smollm2:135m"}),
    ("POST", "/api/push", {"model": "smollm2:135m"}),
    ("POST", "/api/blobs/sha256:29fdb92e57cf0827ded04ae6461b5931d01fa595843f55d36f5b275a52087dd2", None),
    ("HEAD", "/api/blobs/sha256:29fdb92e57cf0827ded04ae6461b5931d01fa595843f55d36f5b275a52087dd2", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN, ids=[a[1].split("/")[2] + "-" + a[0] for a in ADMIN])
def test_what_the_config_file_does_is_a_501_saying_so(real_server: RunningServer, method: str, path: str, body: object) -> None:
    reply = httpx.request(method, real_server.url + path, json=body)
    assert reply.status_code == 501
    if method != "HEAD":
        assert "YAML config file" in reply.json()["error"]


def test_the_ollama_client_sees_the_501(ol: ollama.Client) -> None:
    for call in (lambda: ol.push("smollm2:135m"), lambda: ol.create("mine", from_="smollm2:135m")):
        with pytest.raises(ollama.ResponseError) as info:
            call()
        assert info.value.status_code == 501 and "edit that file" in info.value.error


# -- building the default model through /api/pull ------------------------------------------


def test_the_builder_s_stage_lines_are_pull_progress() -> None:
    digest = f"sha256:{GGUF_SHA256}"
    line = "[2/4] [##..] building int4 ONNX model for cpu (onnxruntime-genai builder)…"
    assert stage_progress(line, digest) == PullProgress(
        status="building int4 ONNX model for cpu (onnxruntime-genai builder)", digest=digest, total=4, completed=1
    )
    assert stage_progress("model ready in 54.4s: /x", digest) is None


def test_the_build_s_refusal_reaches_the_callback(tmp_path: Path) -> None:
    """A provider the builder does not know fails at once: the reason reaches the
    progress callback and the failure is a PrepareError naming it."""
    events: list[object] = []
    with pytest.raises(PrepareError, match="provider must be one of"):
        asyncio.run(prepare_in_subprocess("nope", tmp_path, events.append))  # type: ignore[arg-type]
    assert any(getattr(e, "status", "").startswith("error: provider must be one of") for e in events)


@pytest.fixture
def unbuilt_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_home: Path) -> Path:
    """A DRAGOMAN_HOME without a built model (the GGUF linked in, so a build needs no download)."""
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path))
    (tmp_path / "downloads").symlink_to(model_home / "downloads")
    return tmp_path


def test_an_unbuilt_model_that_may_not_be_built_says_what_to_run(unbuilt_home: Path) -> None:
    path = default_model_path("cpu", unbuilt_home)
    config = config_from_yaml(f'models:\n  - {{name: "smollm2:135m", backend: onnx, path: "{path}", prepare: false}}\n')
    with serve(config) as server:
        whole = httpx.post(server.url + "/api/pull", json={"model": "smollm2:135m", "stream": False}, timeout=30)
        assert whole.status_code == 502 and "run: dragoman models prepare" in whole.json()["error"]
        lines = [json.loads(x) for x in httpx.post(server.url + "/api/pull", json={"model": "smollm2:135m"}, timeout=30).text.splitlines()]
        assert lines[0] == {"status": "pulling manifest"} and "run: dragoman models prepare" in lines[-1]["error"]


@pytest.mark.skipif(
    os.environ.get("DRAGOMAN_TEST_BUILD") != "1",
    reason="builds the default model from scratch (about a minute on 2 cores); set DRAGOMAN_TEST_BUILD=1 to run it",
)
def test_pulling_the_default_model_builds_it_with_progress(unbuilt_home: Path) -> None:
    path = default_model_path("cpu", unbuilt_home)
    config = config_from_yaml(f'models:\n  - {{name: "smollm2:135m", backend: onnx, path: "{path}"}}\n')
    with serve(config) as server:
        client = ollama.Client(host=server.url, timeout=600)
        steps = list(client.pull("smollm2:135m", stream=True))
        assert steps[0].status == "pulling manifest" and steps[-1].status == "success"
        stages = [s for s in steps if s.total]
        assert [s.completed for s in stages] == [0, 1, 2, 3, 4] and {s.total for s in stages} == {4}
        assert {s.digest for s in stages} == {f"sha256:{GGUF_SHA256}"}
        assert client.generate(model="smollm2:135m", prompt="Hi", options={"num_predict": 2}).done


def test_the_hook_for_names_the_config_does_not_serve(real_server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """``backends.pull.buildable`` is where ``models prepare`` can offer builds for
    other names: what it returns runs with the same progress stream."""

    async def build(progress: model_admin_routes.ProgressCallback) -> None:
        progress(PullProgress(status="converting", digest="sha256:0", total=2, completed=1))

    monkeypatch.setattr(model_admin_routes, "buildable", lambda name: build if name == "ollama:tinyllama" else None)
    lines = httpx.post(real_server.url + "/api/pull", json={"model": "ollama:tinyllama"}, timeout=30).text.splitlines()
    assert [json.loads(x) for x in lines] == [
        {"status": "pulling manifest"},
        {"status": "converting", "digest": "sha256:0", "total": 2, "completed": 1},
        {"status": "success"},
    ]
