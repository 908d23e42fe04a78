"""``/api/pull ollama:NAME`` against a local Ollama store that someone else wrote:
what is not what Ollama writes (a FIFO, a symlink, a size other than the declared one,
bytes other than the digest names, a path off the store) is refused with a one-line
reason, and the server keeps answering meanwhile. Over real HTTP, a real server on
127.0.0.1 whose builds run as real child processes."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path, PureWindowsPath

import httpx
import pytest

from dragoman.backends.onnx.prepare import ollama_store
from dragoman.backends.onnx.prepare.ollama_store import OllamaName, parse_name
from dragoman.backends.onnx.prepare.store_files import inside
from dragoman.backends.onnx.prepare.support import PrepareError
from dragoman.config import load_config
from dragoman.backends.registry import settings_type
from tests.prepare.test_sources import gguf_file
from tests.support.ollama_store import Store
from tests.support.server import RunningServer, serve


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "secret-folder-dragoman.yaml"
    path.write_text("models: []\n")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, store: Store, config_file: Path) -> Iterator[RunningServer]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAGOMAN_HOME", str(tmp_path_factory.mktemp("home")))
        with serve(load_config(str(config_file), settings_type)) as running:
            yield running


def pull(server: RunningServer, name: str) -> list[dict]:
    reply = httpx.post(f"{server.url}/api/pull", json={"model": name}, timeout=120)
    assert reply.status_code == 200, reply.text
    return [json.loads(line) for line in reply.text.splitlines()]


def layer_blob(store: Store, manifest: Path, kind: str) -> tuple[Path, dict]:
    layers = json.loads(manifest.read_text())["layers"]
    layer = next(x for x in layers if x["mediaType"].endswith(kind))
    return store.root / "blobs" / layer["digest"].replace(":", "-"), layer


def test_a_fifo_layer_is_refused_and_the_server_keeps_answering(server: RunningServer, store: Store, tmp_path: Path) -> None:
    manifest = store.add_model("fifo", "latest", gguf_file(tmp_path / "m.gguf"), template="{{ .Prompt }} fifo")
    blob, _ = layer_blob(store, manifest, ".template")
    blob.unlink()
    os.mkfifo(blob)
    lines: list[dict] = []
    puller = threading.Thread(target=lambda: lines.extend(pull(server, "ollama:fifo")))
    puller.start()
    gaps = []
    while puller.is_alive() and len(gaps) < 40:
        began = time.perf_counter()
        assert httpx.get(f"{server.url}/api/version", timeout=5).status_code == 200
        gaps.append(time.perf_counter() - began)
        time.sleep(0.05)
    puller.join(timeout=60)
    assert max(gaps) < 1.0
    assert "is a FIFO, not a regular file" in lines[-1]["error"] and "template layer" in lines[-1]["error"]


def test_a_symlink_out_of_the_store_is_not_followed(server: RunningServer, store: Store, tmp_path: Path) -> None:
    manifest = store.add_model("linked", "latest", gguf_file(tmp_path / "m.gguf"), system="You are a pirate.")
    blob, _ = layer_blob(store, manifest, ".system")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(blob.read_bytes())  # the same bytes: size and digest would pass
    blob.unlink()
    blob.symlink_to(outside)
    error = pull(server, "ollama:linked")[-1]["error"]
    assert "system layer" in error and "is a symlink, not a regular file" in error


def test_a_symlinked_folder_out_of_the_store_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = Store(tmp_path / "elsewhere")
    elsewhere.add_model("m", "latest", gguf_file(tmp_path / "m.gguf"))
    root = tmp_path / "store"
    (root / "manifests").parent.mkdir(parents=True)
    (root / "manifests").symlink_to(elsewhere.root / "manifests")
    with pytest.raises(PrepareError, match="resolves outside the Ollama store"):
        ollama_store.read_model("m", root)


def test_a_layer_larger_than_declared_is_not_read(server: RunningServer, store: Store, tmp_path: Path) -> None:
    manifest = store.add_model("bloated", "latest", gguf_file(tmp_path / "m.gguf"), system="Be brief.")
    blob, layer = layer_blob(store, manifest, ".system")
    blob.write_bytes(b"x" * (3 << 20))  # declared 9 bytes, holds 3 MiB
    error = pull(server, "ollama:bloated")[-1]["error"]
    assert f"has {3 << 20} bytes and the manifest says {layer['size']}" in error
    # Declared large: refused by the cap, named, before anything is read.
    text = json.loads(manifest.read_text())
    next(x for x in text["layers"] if x["mediaType"].endswith(".system"))["size"] = 3 << 20
    manifest.write_text(json.dumps(text))
    error = pull(server, "ollama:bloated")[-1]["error"]
    assert "declares 3145728 bytes, over the 1048576 bytes a text layer may have" in error


def test_a_text_layer_holding_other_bytes_than_its_digest_is_refused(server: RunningServer, store: Store, tmp_path: Path) -> None:
    manifest = store.add_model("swapped", "latest", gguf_file(tmp_path / "m.gguf"), system="Be kind.")
    blob, _ = layer_blob(store, manifest, ".system")
    blob.write_bytes(b"Be evil.")  # the same size
    error = pull(server, "ollama:swapped")[-1]["error"]
    assert "system layer" in error and "does not hold the bytes its name" in error


def test_the_model_blob_is_hashed_with_progress_and_a_mismatch_refused(
    server: RunningServer, store: Store, tmp_path: Path
) -> None:
    # An architecture refused after the hash, so no build runs in this test.
    manifest = store.add_model("hashed", "latest", gguf_file(tmp_path / "m.gguf", arch="mamba"))
    blob, layer = layer_blob(store, manifest, ".model")
    lines = pull(server, "ollama:hashed")
    verifying = [x for x in lines if x.get("status", "").startswith("verifying")]
    assert verifying and {x["digest"] for x in verifying} == {layer["digest"]}
    assert verifying[-1]["status"] == f"verifying {layer['digest']}"
    assert verifying[-1]["completed"] == verifying[-1]["total"] == layer["size"]
    assert "architecture 'mamba' is not supported" in lines[-1]["error"]
    # Unchanged: not hashed again (the hash is remembered by the file's stamp).
    lines = pull(server, "ollama:hashed")
    assert not [x for x in lines if x.get("status", "").startswith("verifying")]
    assert "architecture 'mamba'" in lines[-1]["error"]
    # Other bytes of the same size, the mtime set back: the ctime still tells.
    stat = blob.stat()
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    os.utime(blob, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    lines = pull(server, "ollama:hashed")
    assert [x for x in lines if x.get("status", "").startswith("verifying")]
    assert "the model blob of 'hashed:latest' does not hold the bytes its name" in lines[-1]["error"]
    assert "ollama pull hashed:latest" in lines[-1]["error"]


def test_the_pull_404_does_not_name_the_config_file(server: RunningServer, config_file: Path) -> None:
    reply = httpx.post(f"{server.url}/api/pull", json={"model": "llama3.2:1b", "stream": False})
    assert reply.status_code == 404 and "not served here" in reply.json()["error"]
    assert str(config_file) not in reply.text and "secret-folder" not in reply.text


def test_a_windows_drive_is_not_a_host_and_paths_stay_in_the_store() -> None:
    with pytest.raises(PrepareError, match="a host of one letter before ':' \\('D:'\\) would name a Windows drive"):
        parse_name("D:/ns/model")
    assert parse_name("localhost:5000/ns/model").host == "localhost:5000"
    store = PureWindowsPath("C:/Users/me/.ollama/models")
    # What the drive name made of the manifest path: drive D, off the store.
    escaped = store / "manifests" / "D:" / "ns" / "model" / "latest"
    assert str(escaped) == "D:ns\\model\\latest" and not inside(store, escaped)
    with pytest.raises(PrepareError, match="names a path outside the Ollama store"):
        OllamaName("D:", "ns", "model", "latest").manifest_path(store)
    assert inside(store, OllamaName("registry.ollama.ai", "library", "m", "latest").manifest_path(store))
    assert inside(store, PureWindowsPath("c:/users/ME/.ollama/models/blobs/x"))  # Windows names fold case
    assert not inside(store, PureWindowsPath("C:/Users/me/.ollama/models/../x"))
    assert not inside(store, PureWindowsPath("//server/share/models/x"))
