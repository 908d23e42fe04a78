"""What ``prepare`` refuses before any work, and how it reads each kind of SOURCE:
tables over small files written here (no build runs in this module)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dragoman.backends.gguf_file import Field, TensorData, TensorInfo, ValueType, write_gguf
from dragoman.backends.onnx.prepare import build as build_module
from dragoman.backends.onnx.prepare import go_templates, ollama_store, prepare, support
from dragoman.backends.onnx.prepare.architectures import check_target
from dragoman.backends.onnx.prepare.ollama_store import OllamaName, parse_name
from dragoman.backends.onnx.prepare.sources import human_count, resolve, slug
from dragoman.backends.onnx.prepare.support import PrepareError
from tests.support.ollama_store import SMOLLM2_TEMPLATE, Store


def gguf_file(path: Path, arch: str = "llama", *, tensor_type: int = 0, template: str | None = "{{ x }}",
              tokenizer: str = "gpt2", extra: list[Field] = ()) -> Path:  # type: ignore[assignment]  # fmt: skip
    fields = [
        Field("general.architecture", ValueType.STRING, arch),
        Field("general.name", ValueType.STRING, "Tiny Test 1B"),
        Field(f"{arch}.context_length", ValueType.UINT32, 2048),
        Field("tokenizer.ggml.model", ValueType.STRING, tokenizer),
        *([Field("tokenizer.chat_template", ValueType.STRING, template)] if template else []),
        *extra,
    ]
    info = TensorInfo("token_embd.weight", (256,), tensor_type, 0)
    data = path.with_suffix(".data")
    data.write_bytes(b"\0" * info.nbytes)
    write_gguf(path, fields, [TensorData(info, data, 0)])
    return path


REFUSALS = [
    ("granite gguf", dict(arch="granite"), "transformers cannot read Granite GGUF files"),
    ("unknown arch", dict(arch="mamba"), "architecture 'mamba' is not supported from GGUF (supported: gemma2"),
    ("Q8_1 tensors", dict(tensor_type=9), "tensor type Q8_1 cannot be dequantized"),
    ("Q8_K tensors", dict(tensor_type=15), "tensor type Q8_K cannot be dequantized"),
    ("no template", dict(template=None), "has no chat template; pass one with --template"),
    ("t5 tokenizer", dict(tokenizer="bert"), "tokenizer 'bert' is not one transformers rebuilds"),
    ("gemma3 4B+", dict(arch="gemma3", extra=[Field("gemma3.rope.scaling.factor", ValueType.FLOAT32, 8.0)]),
     "Gemma 3 with rope scaling (4B and larger) is not built correctly"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "kwargs", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_gguf_that_cannot_be_built_is_refused_with_the_reason(
    tmp_path: Path, case: str, kwargs: dict, message: str
) -> None:
    path = gguf_file(tmp_path / "m.gguf", **kwargs)
    with pytest.raises(PrepareError, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        resolve(str(path), home=tmp_path)


def test_a_gguf_source_says_what_it_is(tmp_path: Path) -> None:
    source = resolve(str(gguf_file(tmp_path / "m.gguf", tensor_type=8)), home=tmp_path)
    assert (source.kind, source.family, source.architecture, source.quantization) == ("gguf", "llama", "LlamaForCausalLM", "")
    assert (source.default_name, source.context_length, source.template_origin) == ("tiny-test-1b", 2048, "gguf")
    assert source.content_sha256 == support.sha256_file(tmp_path / "m.gguf")


def hf_folder(path: Path, config: dict, *, weights: bool = True, tokenizer: bool = True) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    if weights:
        header = json.dumps({"w": {"dtype": "F32", "shape": [10, 20], "data_offsets": [0, 800]}}).encode()
        (path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 800)
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
        (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    return path


HF_REFUSALS = [
    ("unknown arch", {"architectures": ["BertModel"]}, {}, "architecture 'BertModel' \\(config.json\\) is not supported"),
    ("quantized", {"architectures": ["LlamaForCausalLM"], "quantization_config": {"quant_method": "gptq"}}, {},
     "already quantized \\(gptq\\)"),
    ("no weights", {"architectures": ["LlamaForCausalLM"]}, {"weights": False}, "no \\*.safetensors weights"),
    ("no tokenizer", {"architectures": ["LlamaForCausalLM"]}, {"tokenizer": False}, "no tokenizer.json"),
    ("gemma3 scaled", {"architectures": ["Gemma3ForCausalLM"], "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
     {}, "Gemma 3 with rope scaling"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "config", "kwargs", "message"), HF_REFUSALS, ids=[r[0] for r in HF_REFUSALS])
def test_a_hf_folder_that_cannot_be_built_is_refused(tmp_path: Path, case: str, config: dict, kwargs: dict, message: str) -> None:
    with pytest.raises(PrepareError, match=message):
        resolve(str(hf_folder(tmp_path / "model", config, **kwargs)), home=tmp_path)


def test_a_hf_folder_counts_its_parameters_from_the_safetensors_headers(tmp_path: Path) -> None:
    folder = hf_folder(tmp_path / "Qwen2.5-0.5B-Instruct", {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                                                            "max_position_embeddings": 32768, "torch_dtype": "bfloat16"})  # fmt: skip
    source = resolve(str(folder), home=tmp_path)
    assert (source.kind, source.parameters, source.default_name, source.quantization) == ("hf", 200, "qwen2.5-0.5b-instruct", "bfloat16")


def test_what_is_not_a_source_lists_the_kinds(tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match="is not a GGUF file, a Hugging Face folder, 'ollama:NAME\\[:TAG\\]' or a known name \\(smollm2\\)"):
        resolve(str(tmp_path / "nothing-here"), home=tmp_path)


@pytest.mark.parametrize(
    ("provider", "precision", "message"),
    [("cpu", "int4", None), ("cpu", "fp32", None), ("cuda", "fp16", None), ("dml", "int4", None), ("dml", "fp16", None),
     ("cpu", "fp16", "makes int4, fp32 for cpu"), ("dml", "fp32", "makes int4, fp16 for dml"),
     ("tpu", "int4", "provider must be one of cpu, cuda, dml")],
)  # fmt: skip
def test_provider_and_precision_pairs(provider: str, precision: str, message: str | None) -> None:
    problem = check_target(provider, precision)
    assert problem is None if message is None else message in (problem or "")


# -- Ollama -------------------------------------------------------------------------------


NAMES = [
    ("smollm2", OllamaName("registry.ollama.ai", "library", "smollm2", "latest"), "smollm2:latest"),
    ("smollm2:135m", OllamaName("registry.ollama.ai", "library", "smollm2", "135m"), "smollm2:135m"),
    ("me/mine:v1", OllamaName("registry.ollama.ai", "me", "mine", "v1"), "me/mine:v1"),
    ("hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q4_K_M", OllamaName("hf.co", "bartowski", "Qwen2.5-0.5B-GGUF", "Q4_K_M"),
     "hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q4_K_M"),
    ("localhost:5000/me/m", OllamaName("localhost:5000", "me", "m", "latest"), "localhost:5000/me/m:latest"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "name", "display"), NAMES, ids=[n[0] for n in NAMES])
def test_ollama_names_parse_as_ollama_parses_them(text: str, name: OllamaName, display: str) -> None:
    assert parse_name(text) == name and name.display == display


@pytest.mark.parametrize("text", ["../etc:passwd", "a/b/c/d", "smollm2:", ":tag", "host/na.me/m", "m:t/x", "-x"])
def test_bad_ollama_names_are_refused(text: str) -> None:
    with pytest.raises(PrepareError, match="not an Ollama model name"):
        parse_name(text)


def test_the_store_defaults_to_the_home_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    assert ollama_store.store_dir() == tmp_path / ".ollama" / "models"
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))
    assert ollama_store.store_dir() == tmp_path / "elsewhere"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    return Store(tmp_path / "ollama")


def test_an_ollama_model_carries_params_system_and_notes(tmp_path: Path, store: Store) -> None:
    gguf = gguf_file(tmp_path / "m.gguf")
    store.add_model("tiny", "1b", gguf, template="{{ .Prompt }}", system="Answer in French.",
                    params={"stop": ["<|im_end|>"], "temperature": 0.6, "num_gpu": 99, "num_ctx": 4096},
                    extra_layers=[(b'[{"role":"user","content":"hi"}]', "application/vnd.ollama.image.messages")])  # fmt: skip
    source = resolve("ollama:tiny:1b", home=tmp_path)
    assert (source.kind, source.default_name, source.stem, source.system) == ("ollama", "tiny:1b", "tiny-1b", "Answer in French.")
    assert source.defaults == {"stop": ["<|im_end|>"], "temperature": 0.6, "num_ctx": 4096}
    assert source.extra_eos == ["<|im_end|>"]
    assert source.content_sha256 == support.sha256_file(gguf)  # the blob's name is its hash
    assert source.template_origin == "gguf"
    assert any("num_gpu" in n for n in source.notes) and any("example messages" in n for n in source.notes)
    assert any("Go template is not" in n for n in source.notes)


def test_a_go_only_template_of_a_known_shape_becomes_its_jinja(tmp_path: Path, store: Store) -> None:
    store.add_model("smol", "latest", gguf_file(tmp_path / "m.gguf", template=None), template=SMOLLM2_TEMPLATE)
    source = resolve("ollama:smol", home=tmp_path)
    assert (source.template, source.template_origin) == (go_templates.CHATML, "go:chatml")


def test_a_go_only_template_of_an_unknown_shape_asks_for_a_jinja_file(tmp_path: Path, store: Store) -> None:
    store.add_model("odd", "latest", gguf_file(tmp_path / "m.gguf", template=None), template="### {{ .Prompt }}\n")
    with pytest.raises(PrepareError, match="has only a Go template, which dragoman cannot run.*--template FILE.jinja"):
        resolve("ollama:odd", home=tmp_path)
    jinja = tmp_path / "t.jinja"
    jinja.write_text("{% for m in messages %}### {{ m['content'] }}\n{% endfor %}")
    assert resolve("ollama:odd", home=tmp_path, template_file=jinja).template_origin == f"file {jinja}"


STORE_FAULTS = [
    ("missing", lambda s, g: None, "no Ollama model 'tiny:latest' in .*the store has: none.*ollama pull tiny:latest"),
    ("adapter", lambda s, g: s.add_model("tiny", "latest", g, extra_layers=[(b"lora", "application/vnd.ollama.image.adapter")]),
     "LoRA adapter"),
    ("cloud", lambda s, g: s.add_model("tiny", "latest", g, config_extra={"remote_host": "https://ollama.com:443"}),
     "cloud model"),
    ("truncated", lambda s, g: (s.add_model("tiny", "latest", g), _truncate(s)), "the pull was interrupted"),
]  # fmt: skip


def _truncate(store: Store) -> None:
    blob = max((store.root / "blobs").iterdir(), key=lambda p: p.stat().st_size)
    blob.write_bytes(blob.read_bytes()[:-1])


@pytest.mark.parametrize(("case", "setup", "message"), STORE_FAULTS, ids=[f[0] for f in STORE_FAULTS])
def test_store_faults_are_refused_with_what_to_do(tmp_path: Path, store: Store, case: str, setup, message: str) -> None:  # type: ignore[no-untyped-def]
    setup(store, gguf_file(tmp_path / "m.gguf"))
    with pytest.raises(PrepareError, match=message):
        resolve("ollama:tiny", home=tmp_path)


def test_the_store_lists_models_as_ollama_displays_them(tmp_path: Path, store: Store) -> None:
    gguf = gguf_file(tmp_path / "m.gguf")
    store.add_model("b", "latest", gguf)
    store.add_model("a", "7b", gguf)
    assert ollama_store.list_models(store.root) == ["a:7b", "b:latest"]


@pytest.mark.parametrize(("go", "shape"), [
    (SMOLLM2_TEMPLATE, "chatml"),
    ("<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>", "llama3"),
    ("<start_of_turn>user\n{{ .Prompt }}<end_of_turn>", "gemma"),
    ("<|user|>\n{{ .Prompt }}<|end|>", "phi3"),
    ("[INST] {{ .Prompt }} [/INST]", "mistral"),
    ("{{ .Prompt }}", None),
])  # fmt: skip
def test_go_template_shapes(go: str, shape: str | None) -> None:
    found = go_templates.recognise(go)
    assert (found[0] if found else None) == shape


# -- checks before work --------------------------------------------------------------------


def test_prepare_refuses_up_front_when_memory_or_disk_is_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = gguf_file(tmp_path / "m.gguf")
    monkeypatch.setattr(build_module, "missing_build_tools", lambda: [])
    monkeypatch.setattr(support, "available_memory", lambda: 256 * support.MiB)
    monkeypatch.setattr(support, "free_disk", lambda path: 10 * support.MiB)
    with pytest.raises(PrepareError) as caught:
        prepare(str(path), home=tmp_path, progress=False)
    message = str(caught.value)
    assert "needs about 64.0 MiB of disk" in message and "10.0 MiB is free" in message
    assert "needs about 529.9 MiB of memory at its peak" in message and "256.0 MiB is available" in message
    assert "as int4 (streamed from the GGUF a layer at a time) needs" in message
    assert not (tmp_path / "models").exists() or not list((tmp_path / "models").iterdir())


def test_the_refusal_names_the_full_model_path_and_its_larger_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = gguf_file(tmp_path / "m.gguf")
    monkeypatch.setattr(build_module, "missing_build_tools", lambda: [])
    monkeypatch.setattr(support, "available_memory", lambda: 256 * support.MiB)
    monkeypatch.setenv(build_module.PATH_VARIABLE, "full")
    with pytest.raises(PrepareError) as caught:
        prepare(str(path), home=tmp_path, progress=False)
    message = str(caught.value)
    assert f"as int4 (through a float32 copy of the whole model: {build_module.PATH_VARIABLE}=full) needs" in message
    assert "needs about 460.8 MiB of memory at its peak" in message


def test_missing_build_tools_are_named_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_module, "missing_build_tools", lambda: ["torch"])
    with pytest.raises(PrepareError, match=r"needs torch; install them with: pip install 'dragoman\[prepare\]'"):
        prepare(str(gguf_file(tmp_path / "m.gguf")), home=tmp_path, progress=False)


@pytest.mark.parametrize(("text", "expected"), [("smollm2:135m", "smollm2-135m"), ("hf.co/x/Y:Q4_K_M", "hf.co-x-y-q4_k_m"),
                                                ("SmolLM2 135M Instruct", "smollm2-135m-instruct"), ("///", "model")])  # fmt: skip
def test_slug(text: str, expected: str) -> None:
    assert slug(text) == expected


@pytest.mark.parametrize(("n", "expected"), [(134_515_008, "135M"), (494_032_768, "494M"), (1_543_714_304, "1.5B"),
                                             (7_000_000_000, "7B"), (98_560, "98.6K")])  # fmt: skip
def test_parameter_counts_read_as_ollama_shows_them(n: int, expected: str) -> None:
    assert human_count(n) == expected


def test_pull_source_names_what_a_pull_builds(tmp_path: Path, store: Store) -> None:
    from dragoman.backends.onnx.prepare.background import pull_source

    store.add_model("qwen2.5", "0.5b", gguf_file(tmp_path / "m.gguf"))
    assert pull_source("smollm2") == "smollm2" and pull_source("smollm2:135m") == "smollm2:135m"
    assert pull_source("ollama:qwen2.5:0.5b") == "ollama:qwen2.5:0.5b"
    assert pull_source("qwen2.5:0.5b") is None  # a plain name is not looked up in the Ollama store
    assert pull_source("ollama:qwen2.5:7b") is None and pull_source("ollama:../x") is None
