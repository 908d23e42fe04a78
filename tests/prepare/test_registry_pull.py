"""Pulling by name from an Ollama registry (dragoman/backends/onnx/prepare/registry.py),
against a stand-in registry on 127.0.0.1 that speaks the protocol (manifest media type,
Docker-Content-Digest, 307 to another path for each blob, Range): the download itself,
stopping before any build (tests/prepare/test_registry_build.py builds one)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from dragoman.backends.onnx.prepare import ollama_store, registry, support
from dragoman.backends.onnx.prepare.support import PrepareError
from dragoman.backends.pull_progress import PullProgress
from tests.support.ollama_registry import Registry, running_registry
from tests.support.server import config_from_yaml, serve

MODEL = "application/vnd.ollama.image.model"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stand_in() -> Iterator[Registry]:
    with running_registry() as served:
        yield served


def _add_tiny(served: Registry, name: str = "library/tiny:1b") -> tuple[bytes, dict[str, object]]:
    weights = os.urandom(3 * (1 << 20) + 123)  # not a GGUF: nothing here reads it as one
    manifest = served.add(name, [
        (MODEL, weights),
        ("application/vnd.ollama.image.template", b"{{ .Prompt }}"),
        ("application/vnd.ollama.image.params", json.dumps({"stop": ["<end>"], "temperature": 0.5}).encode()),
        ("application/vnd.ollama.image.license", b"Apache-2.0"),
    ])  # fmt: skip
    return weights, manifest


def _pull(name: str, served: Registry, home: Path) -> list[PullProgress]:
    steps: list[PullProgress] = []
    asyncio.run(registry.pull(name, registry=served.url, home=home, report=steps.append))
    return steps


def test_a_pull_writes_an_ollama_store_and_reports_as_ollama_does(stand_in: Registry, tmp_path: Path) -> None:
    weights, manifest = _add_tiny(stand_in)
    steps = _pull("tiny:1b", stand_in, tmp_path)
    store = ollama_store.pulled_store(tmp_path)
    digest = manifest["layers"][0]["digest"]  # type: ignore[index]
    assert (store / "blobs" / f"sha256-{digest[7:]}").read_bytes() == weights
    assert not list(store.glob("blobs/*partial*"))
    assert (store / "manifests/registry.ollama.ai/library/tiny/1b").is_file()
    found = ollama_store.read_model("tiny:1b", store)
    assert found.template == "{{ .Prompt }}" and found.params == {"stop": ["<end>"], "temperature": 0.5}
    model_steps = [s for s in steps if s.digest == digest]
    assert {s.status for s in model_steps} == {f"pulling {digest[7:19]}"}
    assert model_steps[0].completed == 0 and model_steps[-1].completed == model_steps[-1].total == len(weights)
    assert len(model_steps) >= 4  # reported as it arrives, not only at the end
    assert [s.status for s in steps[-2:]] == ["verifying sha256 digest", "writing manifest"]
    # The manifest by its media type, each blob through the 307 to the other path.
    assert stand_in.requests[0] == "GET /v2/library/tiny/manifests/1b"
    assert f"GET /v2/library/tiny/blobs/{digest}" in stand_in.requests and f"GET /cdn/{digest}" in stand_in.requests
    # A second pull downloads no blob again.
    stand_in.requests.clear()
    _pull("tiny:1b", stand_in, tmp_path)
    assert stand_in.requests == ["GET /v2/library/tiny/manifests/1b"]


def test_two_processes_pulling_one_model_at_once_both_get_it_whole(stand_in: Registry, tmp_path: Path) -> None:
    """Two server processes (server.workers) or a server and ``dragoman models pull``: one
    downloads each blob, the other waits for it (a lock file per blob), rather than both
    writing one -partial file."""
    weights, manifest = _add_tiny(stand_in)
    stand_in.pace = 0.3  # the model blob takes about a second: the two pulls overlap
    code = ("import asyncio, pathlib, sys; from dragoman.backends.onnx.prepare import registry; "
            "asyncio.run(registry.pull('tiny:1b', registry=sys.argv[1], home=pathlib.Path(sys.argv[2])))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pulls = [subprocess.Popen([sys.executable, "-c", code, stand_in.url, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]  # fmt: skip
    for pull in pulls:
        output, _ = pull.communicate(timeout=120)
        assert pull.returncode == 0, output
    digest = manifest["layers"][0]["digest"]  # type: ignore[index]
    store = ollama_store.pulled_store(tmp_path)
    assert (store / "blobs" / f"sha256-{digest[7:]}").read_bytes() == weights
    assert not list(store.glob("blobs/*partial*"))
    assert stand_in.requests.count(f"GET /cdn/{digest}") == 1, stand_in.requests


def test_a_dropped_connection_resumes_with_range(stand_in: Registry, tmp_path: Path) -> None:
    weights, manifest = _add_tiny(stand_in)
    digest = str(manifest["layers"][0]["digest"])  # type: ignore[index]
    stand_in.drop_once[digest] = (1 << 20) + 77
    _pull("tiny:1b", stand_in, tmp_path)
    store = ollama_store.pulled_store(tmp_path)
    assert (store / "blobs" / f"sha256-{digest[7:]}").read_bytes() == weights
    # One more GET, from the byte where the body stopped (the Range carried through the 307).
    assert [r for r in stand_in.requests if r.startswith(f"GET /cdn/{digest}")] == [
        f"GET /cdn/{digest}", f"GET /cdn/{digest} (bytes={(1 << 20) + 77}-)"]


def test_a_partial_file_from_an_earlier_pull_is_resumed(stand_in: Registry, tmp_path: Path) -> None:
    weights, manifest = _add_tiny(stand_in)
    digest = str(manifest["layers"][0]["digest"])  # type: ignore[index]
    blobs = ollama_store.pulled_store(tmp_path) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"sha256-{digest[7:]}-partial").write_bytes(weights[:1000])
    steps = _pull("tiny:1b", stand_in, tmp_path)
    assert f"GET /cdn/{digest} (bytes=1000-)" in stand_in.requests
    assert next(s for s in steps if s.digest == digest).completed == 1000
    assert (blobs / f"sha256-{digest[7:]}").read_bytes() == weights


def test_a_corrupted_blob_is_deleted_and_said(stand_in: Registry, tmp_path: Path) -> None:
    _, manifest = _add_tiny(stand_in)
    digest = str(manifest["layers"][0]["digest"])  # type: ignore[index]
    stand_in.corrupt.add(digest)
    with pytest.raises(PrepareError, match=r"digest mismatch: the blob sha256:\w{12}… of 'tiny:1b' downloaded as .*"
                                           r"the partial download was deleted — pull again"):  # fmt: skip
        _pull("tiny:1b", stand_in, tmp_path)
    store = ollama_store.pulled_store(tmp_path)
    assert not list(store.glob(f"blobs/sha256-{digest[7:]}*"))  # neither the partial nor a finished-looking blob
    assert not (store / "manifests").exists()


@pytest.mark.parametrize("bad", ["bad name", "../../etc/passwd", "a/b/c/d", "tiny:", "-tiny", "ns.x/tiny", "t" * 81, "tiny:a/b"])
def test_bad_names_are_refused_before_any_request(stand_in: Registry, tmp_path: Path, bad: str) -> None:
    with pytest.raises(PrepareError, match="is not an Ollama model name"):
        _pull(bad, stand_in, tmp_path)
    assert stand_in.requests == []


def test_an_unknown_model_says_so(stand_in: Registry, tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match=r"the registry http://127\.0\.0\.1:\d+ has no model 'nothing:latest'"):
        _pull("nothing", stand_in, tmp_path)


def test_the_disk_is_checked_before_downloading(stand_in: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _add_tiny(stand_in)
    monkeypatch.setattr(support, "free_disk", lambda at: 1 << 20)
    with pytest.raises(PrepareError, match=r"downloading 'tiny:1b' \(3\.0 MiB left to fetch\) needs about .* 1\.0 MiB is free"):
        _pull("tiny:1b", stand_in, tmp_path)
    assert stand_in.requests == ["GET /v2/library/tiny/manifests/1b"]  # no blob asked for


def test_the_cli_pulls_then_builds_and_refuses_bad_names(stand_in: Registry, tmp_path: Path) -> None:
    _add_tiny(stand_in)
    env = {**os.environ, "DRAGOMAN_HOME": str(tmp_path), "OLLAMA_MODELS": str(tmp_path / "no-ollama"), "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "dragoman", "models", "pull", "--registry", stand_in.url]
    bad = subprocess.run([*run, "tiny:a/b"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1 and "'tiny:a/b' is not an Ollama model name" in bad.stderr and stand_in.requests == []
    done = subprocess.run([*run, "tiny:1b"], capture_output=True, text=True, env=env, timeout=300)
    # Downloaded with Ollama's lines, then built as `prepare ollama:tiny:1b` — which refuses
    # these random bytes as a GGUF, saying so (a real GGUF is built in test_registry_build.py).
    assert "pulling manifest" in done.stderr and "writing manifest" in done.stderr
    assert "pulling " in done.stderr and "MiB of 3.0 MiB" in done.stderr
    assert done.returncode == 1 and "sha256-" in done.stderr and "GGUF" in done.stderr, done.stderr
    assert (tmp_path / "ollama/manifests/registry.ollama.ai/library/tiny/1b").is_file()


def test_the_server_checks_the_name_first_and_says_what_the_registry_said(stand_in: Registry) -> None:
    config = config_from_yaml(
        f"""\
        server: {{registry: "{stand_in.url}"}}
        models:
          - {{name: scripted, backend: tests.support.scripted:ScriptedBackend}}
        """
    )
    with serve(config) as server:
        client = ollama.Client(host=server.url)
        with pytest.raises(ollama.ResponseError) as info:
            client.pull("bad name!")
        assert info.value.status_code == 404 and "it is not an Ollama model name to pull" in info.value.error
        assert stand_in.requests == []
        with pytest.raises(ollama.ResponseError, match="has no model 'nothing:latest'; check the name and tag"):
            list(client.pull("nothing", stream=True))
        assert stand_in.requests == ["GET /v2/library/nothing/manifests/latest"]
