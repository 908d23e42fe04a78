"""Ollama's delete and copy for the models dragoman built: ``client.copy`` and
``client.delete`` of the official ``ollama`` client through the real server, and
``dragoman models rm`` / ``cp``. A copy is another name of a build; a delete removes a
name, and the folder with its last name; both are refused, naming it, while a config
entry serves what would go or a model worker has it loaded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import ollama
import pytest

from dragoman.backends.onnx import built_models
from dragoman.backends.onnx.prepare import catalogue
from dragoman.backends.onnx.prepare.catalogue import Build, BuildRecord
from dragoman.backends.onnx.prepare.entry import ADDED, add_to_config
from dragoman.proxy.cli import main
from tests.support.server import RunningServer, config_from_yaml, serve


def make_build(home: Path, model_dir: Path, folder: str, name: str, names: tuple[str, ...] = ()) -> Build:
    """A build in ``home``: the real default model's files linked in (deleting the build
    removes the links, never the test model), with its own marker."""
    path = home / "models" / folder
    path.mkdir(parents=True)
    for file in model_dir.iterdir():
        if file.name != catalogue.MARKER:
            (path / file.name).symlink_to(file)
    record = msgspec.json.decode((model_dir / catalogue.MARKER).read_bytes(), type=BuildRecord)
    record = msgspec.structs.replace(record, name=name, names=list(names), provider="cpu")
    catalogue.write_record(path, record, hash_files=False)
    return Build(folder, path, record)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> Path:
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path / "home"))
    make_build(tmp_path / "home", model_dir, "tiny-int4-cpu", "tiny")
    make_build(tmp_path / "home", model_dir, "other-int4-cpu", "other")
    make_build(tmp_path / "home", model_dir, "pathy-int4-cpu", "pathy")
    return tmp_path / "home"


@pytest.fixture
def server(home: Path) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: "mine", backend: onnx, model: "tiny-copy", provider: cpu, context_length: 512}}
          - {{name: "by-path", backend: onnx, path: "{home / 'models' / 'pathy-int4-cpu'}", provider: cpu}}
        """
    )
    with serve(config) as running:
        yield running


def names(home: Path) -> dict[str, list[str]]:
    return {b.id: [b.record.name, *b.record.names] for b in catalogue.builds(home)}


def test_copy_then_delete_through_the_ollama_client(server: RunningServer, home: Path) -> None:
    client = ollama.Client(host=server.url)
    chat = lambda: client.chat(model="mine", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2})  # noqa: E731
    with pytest.raises(ollama.ResponseError) as info:
        chat()  # the entry's model: names nothing built yet
    assert info.value.status_code == 404

    assert client.copy("tiny", "tiny-copy").status == "success"
    assert names(home)["tiny-int4-cpu"] == ["tiny", "tiny-copy"]
    assert chat().done  # the entry now finds the build by its new name, and loads it

    # The entry serves (and has loaded) what deleting tiny-copy or the folder would take away.
    for name in ("tiny-copy", "tiny-int4-cpu"):
        with pytest.raises(ollama.ResponseError) as info:
            client.delete(name)
        assert info.value.status_code == 409 and "'mine'" in info.value.error and "tiny-int4-cpu" in info.value.error
    # Its other name can go: the build stays, under the name the entry uses.
    assert client.delete("tiny").status == "success"
    assert names(home)["tiny-int4-cpu"] == ["tiny-copy"]

    # A build nothing serves goes with its last name, leaving nothing behind.
    assert client.delete("other").status == "success"
    assert "other-int4-cpu" not in names(home)
    assert sorted(p.name for p in (home / "models").iterdir()) == ["pathy-int4-cpu", "tiny-int4-cpu"]


def test_refusals_are_ollama_errors(server: RunningServer, home: Path) -> None:
    client = ollama.Client(host=server.url)
    before = names(home)
    for call, status, words in [
        (lambda: client.delete("nothing"), 404, "model 'nothing' not found"),
        (lambda: client.copy("nothing", "x"), 404, "model 'nothing' not found"),
        (lambda: client.copy("tiny", "two words"), 400, "destination: a model name has no spaces"),
        (lambda: client.copy("tiny", "other"), 409, "'other' already names other-int4-cpu"),
        (lambda: client.copy("tiny", "x" * 300), 400, "the limit is 256"),
        (lambda: client.delete("pathy"), 409, "the config entry 'by-path' still serves"),
    ]:  # fmt: skip
        with pytest.raises(ollama.ResponseError) as info:
            call()
        assert info.value.status_code == status and words in info.value.error, info.value.error
    assert names(home) == before  # nothing changed
    reply = httpx.request("DELETE", server.url + "/api/delete", json={})
    assert reply.status_code == 400 and reply.json() == {"error": "model: field required"}
    reply = httpx.post(server.url + "/api/copy", json={"source": "tiny"})
    assert reply.status_code == 400 and "destination" in reply.json()["error"]


def test_a_model_a_worker_has_loaded_is_not_deleted_from_the_command_line(
    server: RunningServer, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another server's config may not serve it, yet its worker has the files loaded."""
    client = ollama.Client(host=server.url)
    client.copy("tiny", "tiny-copy")
    assert client.generate(model="mine", prompt="Hi", options={"num_predict": 2}).done
    empty = tmp_path / "empty.yaml"
    empty.write_text("models: []\n")
    assert main(["models", "rm", "tiny-int4-cpu", "--config", str(empty)]) == 1
    assert "a model worker (pid" in capsys.readouterr().err and "tiny-int4-cpu" in names(home)
    client.generate(model="mine", prompt="", keep_alive=0)  # unloaded: the worker ends
    tiny = next(b for b in catalogue.builds(home) if b.id == "tiny-int4-cpu")
    deadline = time.monotonic() + 20
    while built_models.loaded_by_a_worker(tiny) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert main(["models", "rm", "tiny-int4-cpu", "--config", str(empty)]) == 0
    assert "deleted tiny-int4-cpu" in capsys.readouterr().out and "tiny-int4-cpu" not in names(home)


def test_rm_removes_the_entry_add_to_wrote_only_when_asked(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  - {name: by-hand, backend: onnx, model: other, provider: cpu}\n")
    tiny = next(b for b in catalogue.builds(home) if b.id == "tiny-int4-cpu")
    add_to_config(config, tiny, "tiny")
    written = config.read_text()
    assert f'- name: "tiny"   {ADDED}' in written

    assert main(["models", "rm", "tiny", "--config", str(config)]) == 1
    assert "config entry 'tiny' still serves" in capsys.readouterr().err
    assert main(["models", "rm", "other", "--config", str(config), "--remove-entry"]) == 1
    assert "no entry 'other' that --add-to wrote" in capsys.readouterr().err
    assert config.read_text() == written and len(names(home)) == 3  # refused: nothing changed

    assert main(["models", "rm", "tiny", "--config", str(config), "--remove-entry"]) == 0
    assert config.read_text() == "models:\n  - {name: by-hand, backend: onnx, model: other, provider: cpu}\n"
    assert "tiny-int4-cpu" not in names(home)

    assert main(["models", "cp", "other", "other:latest"]) == 0
    assert "also answers to 'other:latest'" in capsys.readouterr().out
    assert names(home)["other-int4-cpu"] == ["other", "other:latest"]
