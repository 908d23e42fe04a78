"""Turning what the user typed (``SOURCE``) into what a build reads, checked before any
work: a GGUF file, a Hugging Face folder, ``ollama:NAME[:TAG]`` from the local Ollama
store, or a known short name. Only headers are read here (no torch)."""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from dragoman.backends.gguf_file import GgufError, GgufFile, read_gguf
from dragoman.backends.onnx.prepare import go_templates, ollama_store
from dragoman.backends.onnx.prepare.architectures import (
    DEQUANTIZABLE, GGML_TYPES, GGUF_ARCHITECTURES, HF_ARCHITECTURES, REFUSED_GGUF,
)  # fmt: skip
from dragoman.backends.onnx.prepare.support import PrepareError, cached_sha256, sha256_file

SourceKind = Literal["gguf", "hf", "ollama", "known"]
VerifyProgress = Callable[[str, int, int], None]  # (sha256:<hex>, bytes hashed, bytes in all)


class Source(msgspec.Struct, kw_only=True):
    kind: SourceKind
    ref: str  # as typed
    path: Path  # the GGUF file or the HF folder
    is_gguf: bool
    content_sha256: str  # what the build key is made of (with the options)
    default_name: str
    stem: str  # the build folder's name before -<precision>-<provider>
    model: str  # a display name: the GGUF's general.name, the folder's name
    architecture: str  # the transformers class
    family: str
    parameters: int
    quantization: str  # of the source: Q4_1, F16, bfloat16…
    largest_tensor: int = 0  # elements of the GGUF's largest tensor (the streaming build holds one at a time)
    context_length: int | None = None
    template: str | None = None  # a chat template to install over the tokenizer's
    template_origin: str = ""
    defaults: dict[str, Any] = {}
    system: str | None = None
    extra_eos: list[str] = []  # stop strings that may be special tokens
    notes: list[str] = []

    @property
    def parameter_size(self) -> str:
        return human_count(self.parameters)


# -- known names ---------------------------------------------------------------------------


class Known(msgspec.Struct, frozen=True):
    name: str  # served name
    stem: str
    model: str
    find: Callable[[Path | None], Path]  # → the GGUF


def _smollm2_gguf(home: Path | None) -> Path:
    from dragoman.backends.onnx.prepare.pinned_gguf import find_gguf

    return find_gguf(home)


KNOWN: dict[str, Known] = {
    "smollm2": Known("smollm2:135m", "smollm2-135m-instruct", "SmolLM2-135M-Instruct", _smollm2_gguf),
}
KNOWN_ALIASES = {"smollm2:135m": "smollm2"}


def known(ref: str) -> Known | None:
    return KNOWN.get(KNOWN_ALIASES.get(ref, ref))


# -- resolving -------------------------------------------------------------------------------


def resolve(
    ref: str, *, home: Path | None = None, template_file: Path | None = None, on_verify: VerifyProgress | None = None
) -> Source:
    """The source ``ref`` names; raises :class:`PrepareError` naming what is wrong.
    ``on_verify`` hears how far hashing an Ollama blob is."""
    override = _read_template(template_file) if template_file else None
    if ref.startswith("ollama:"):
        source = from_ollama(ref[len("ollama:"):], home, template_given=override is not None, on_verify=on_verify)
    elif (entry := known(ref)) is not None and not Path(ref).exists():
        gguf = entry.find(home)
        source = from_gguf(gguf, ref=ref, home=home)
        source = msgspec.structs.replace(source, kind="known", default_name=entry.name, stem=entry.stem, model=entry.model)
    else:
        path = Path(ref).expanduser()
        if path.is_dir():
            source = from_hf_folder(path, ref=ref, home=home)
        elif path.is_file():
            source = from_gguf(path, ref=ref, home=home)
        else:
            names = ", ".join(sorted(KNOWN))
            raise PrepareError(f"'{ref}' is not a GGUF file, a Hugging Face folder, 'ollama:NAME[:TAG]' or a known "
                               f"name ({names})")  # fmt: skip
    if override is not None:
        source = msgspec.structs.replace(source, template=override, template_origin=f"file {template_file}")
    if not source.template and not source.template_origin:
        raise PrepareError(f"{ref} has no chat template; pass one with --template FILE.jinja")
    return source


def _read_template(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PrepareError(f"cannot read --template {path}: {exc}") from exc
    if "{{" not in text and "{%" not in text:
        raise PrepareError(f"--template {path} is not a Jinja chat template")
    return text


# -- GGUF --------------------------------------------------------------------------------------


def inspect_gguf(path: Path) -> GgufFile:
    """The header, refusing what the path cannot build, with the reason and what to do."""
    try:
        header = read_gguf(path)
    except (GgufError, OSError) as exc:
        raise PrepareError(f"{path}: {exc}") from exc
    arch = str(header.get("general.architecture", ""))
    if arch in REFUSED_GGUF:
        raise PrepareError(f"{path}: architecture '{arch}': {REFUSED_GGUF[arch]}")
    if arch not in GGUF_ARCHITECTURES:
        supported = ", ".join(sorted(GGUF_ARCHITECTURES))
        raise PrepareError(f"{path}: architecture '{arch}' is not supported from GGUF (supported: {supported}); "
                           "a Hugging Face folder of the model may be (see docs/models.md)")  # fmt: skip
    if arch == "gemma3" and header.get("gemma3.rope.scaling.factor") not in (None, 1.0):
        raise PrepareError(f"{path}: Gemma 3 with rope scaling (4B and larger) is not built correctly by "
                           "onnxruntime-genai 0.18's builder (it scales the local-attention layers too); "
                           "Gemma 3 270M and 1B are supported")  # fmt: skip
    bad = sorted({t.type for t in header.tensors} - DEQUANTIZABLE)
    if bad:
        names = ", ".join(GGML_TYPES.get(t, f"type {t}") for t in bad)
        raise PrepareError(f"{path}: tensor type {names} cannot be dequantized by transformers' GGUF reader; "
                           "use a file quantized as Q4_K_M, Q8_0, F16 or another common type")  # fmt: skip
    tokenizer = header.get("tokenizer.ggml.model")
    if tokenizer not in ("gpt2", "llama"):
        raise PrepareError(f"{path}: tokenizer '{tokenizer}' is not one transformers rebuilds from GGUF (gpt2, llama)")
    return header


def from_gguf(path: Path, *, ref: str, home: Path | None, digest: str | None = None) -> Source:
    header = inspect_gguf(path)
    arch = str(header.get("general.architecture"))
    model = str(header.get("general.name") or path.stem)
    template = header.get("tokenizer.chat_template")
    context = header.get(f"{arch}.context_length")
    return Source(
        kind="gguf",
        ref=ref,
        path=path.resolve(),
        is_gguf=True,
        content_sha256=digest or cached_sha256(path, home),
        default_name=slug(model),
        stem=slug(model),
        model=model,
        architecture=GGUF_ARCHITECTURES[arch],
        family=arch,
        parameters=sum(math.prod(t.dims) for t in header.tensors),
        quantization=_main_type(header),
        largest_tensor=max((math.prod(t.dims) for t in header.tensors), default=0),
        context_length=int(context) if isinstance(context, int) else None,
        template=None,
        template_origin="gguf" if isinstance(template, str) and template else "",
    )


def _main_type(header: GgufFile) -> str:
    """The type holding most of the 2-D weights (what Ollama calls the quantization level)."""
    counts: dict[int, int] = {}
    for tensor in header.tensors:
        if len(tensor.dims) >= 2:
            counts[tensor.type] = counts.get(tensor.type, 0) + math.prod(tensor.dims)
    if not counts:
        return ""
    return GGML_TYPES.get(max(counts, key=counts.__getitem__), "?")


# -- Ollama -------------------------------------------------------------------------------------


# Ollama option → SamplingOptions field (same names); runner options are not sampling.
OLLAMA_SAMPLING = (
    "temperature", "top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n", "presence_penalty",
    "frequency_penalty", "tfs_z", "mirostat", "mirostat_tau", "mirostat_eta", "seed", "num_predict", "num_ctx", "stop",
)  # fmt: skip


def from_ollama(
    name: str, home: Path | None, *, template_given: bool = False, on_verify: VerifyProgress | None = None
) -> Source:
    found = ollama_store.read_model(name)
    digest = verified_blob(found, home, on_verify)
    source = from_gguf(found.gguf, ref=f"ollama:{name}", home=home, digest=digest)
    notes = list(found.notes)
    defaults = {k: v for k, v in found.params.items() if k in OLLAMA_SAMPLING}
    dropped = sorted(set(found.params) - set(defaults))
    if dropped:
        notes.append(f"Ollama runner options not carried over: {', '.join(dropped)}")
    if isinstance(defaults.get("stop"), str):
        defaults["stop"] = [defaults["stop"]]
    template, origin = source.template, source.template_origin
    if found.template and origin == "gguf":
        notes.append("the GGUF's own chat template is used; the Ollama Go template is not (dragoman cannot run Go templates)")
    elif found.template and not template_given:
        shape = go_templates.recognise(found.template)
        if shape is None:
            raise PrepareError(f"ollama:{name} has only a Go template, which dragoman cannot run, and its shape is not one "
                               f"it recognises ({', '.join(s[0] for s in go_templates.SHAPES)}); write the same format "
                               "as a Jinja chat template and pass it with --template FILE.jinja")  # fmt: skip
        template, origin = shape[1], f"go:{shape[0]}"
        notes.append(f"the GGUF has no chat template; the Ollama Go template was recognised as {shape[0]} "
                     "and replaced by that format's standard Jinja template (without its tool-calling part)")  # fmt: skip
    return msgspec.structs.replace(
        source,
        kind="ollama",
        default_name=found.name.display,
        stem=slug(found.name.display),
        template=template,
        template_origin=origin,
        defaults=defaults,
        system=found.system or None,
        extra_eos=[s for s in defaults.get("stop", []) if isinstance(s, str)],
        notes=notes,
        parameters=source.parameters,
    )


def verified_blob(found: ollama_store.OllamaModel, home: Path | None, on_verify: VerifyProgress | None) -> str:
    """The GGUF blob's sha256, checked against its name as Ollama checks a pull: a
    blob holding other bytes would otherwise be built, and its build reused for the
    genuine model of that digest. The hash is remembered by the file's stamp
    (:func:`support.file_stamp`), so an unchanged blob is read once, not per pull."""
    named = f"sha256:{found.gguf_digest}"
    report = (lambda done, total: on_verify(named, done, total)) if on_verify is not None else None
    actual = cached_sha256(found.gguf, home, report)
    if actual != found.gguf_digest:
        raise PrepareError(f"the model blob of '{found.name.display}' does not hold the bytes its name ({named[:19]}…) "
                           f"says (it hashes to sha256:{actual[:12]}…); the store is damaged or was altered — "
                           f"pull it again with Ollama (ollama pull {found.name.display})")  # fmt: skip
    return actual


# -- Hugging Face folder ---------------------------------------------------------------------------


def from_hf_folder(path: Path, *, ref: str, home: Path | None) -> Source:
    config = _json(path / "config.json", what="config.json")
    archs = config.get("architectures") or []
    arch = archs[0] if archs else ""
    if arch not in HF_ARCHITECTURES:
        supported = ", ".join(sorted(HF_ARCHITECTURES))
        raise PrepareError(f"{path}: architecture '{arch or 'none'}' (config.json) is not supported (supported: {supported})")
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if arch == "Gemma3ForCausalLM" and _scaled(rope):
        raise PrepareError(f"{path}: Gemma 3 with rope scaling (4B and larger) is not built correctly by onnxruntime-genai "
                           "0.18's builder (it scales the local-attention layers too); Gemma 3 270M and 1B are supported")  # fmt: skip
    quant = config.get("quantization_config")
    if quant:
        raise PrepareError(f"{path}: the checkpoint is already quantized ({quant.get('quant_method', '?')}); "
                           "prepare from the unquantized folder (the builder quantizes to --precision itself)")  # fmt: skip
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise PrepareError(f"{path}: no *.safetensors weights (PyTorch .bin checkpoints are not read: convert them first)")
    if not ((path / "tokenizer.json").is_file() or (path / "tokenizer.model").is_file()):
        raise PrepareError(f"{path}: no tokenizer.json or tokenizer.model")
    files = [f for f in sorted(path.iterdir()) if f.is_file() and not f.name.startswith(".") and f.suffix != ".md"]
    listing = "\n".join(f"{f.name} {cached_sha256(f, home)}" for f in files)
    tokenizer_config = _json(path / "tokenizer_config.json", what="tokenizer_config.json", required=False)
    has_template = bool(tokenizer_config.get("chat_template")) or (path / "chat_template.jinja").is_file()
    text_config = config.get("text_config") or config
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "")
    return Source(
        kind="hf",
        ref=ref,
        path=path.resolve(),
        is_gguf=False,
        content_sha256=sha256_text(listing),
        default_name=slug(path.name),
        stem=slug(path.name),
        model=path.name,
        architecture=arch,
        family=str(config.get("model_type") or arch),
        parameters=sum(_safetensors_elements(f) for f in weights),
        quantization=dtype,
        context_length=text_config.get("max_position_embeddings"),
        template_origin="hf" if has_template else "",
    )


def _scaled(rope: dict[str, Any]) -> bool:
    values = [v for v in rope.values() if isinstance(v, dict)] or [rope]
    return any(v.get("rope_type", v.get("type", "default")) not in ("default", None) for v in values)


def _safetensors_elements(path: Path) -> int:
    """Elements in a safetensors file, from its JSON header (8-byte length first)."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > 100 << 20:
            raise PrepareError(f"{path}: not a safetensors file (header of {length} bytes)")
        header = json.loads(f.read(length))
    return sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")


def _json(path: Path, *, what: str, required: bool = True) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if not required:
            return {}
        raise PrepareError(f"{path.parent}: no {what}; a Hugging Face model folder has config.json, weights and a tokenizer") from None
    except (OSError, ValueError) as exc:
        raise PrepareError(f"{path}: {exc}") from exc
    return value if isinstance(value, dict) else {}


# -- names ---------------------------------------------------------------------------------------


def slug(text: str) -> str:
    """A folder-safe form of a model name: ``smollm2:135m`` → ``smollm2-135m``."""
    return re.sub(r"[^a-z0-9._]+", "-", text.lower()).strip("-.") or "model"


def sha256_text(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def human_count(n: int) -> str:
    """Parameters as Ollama shows them: 135M, 1.5B."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            value = n / size
            return f"{value:.0f}{unit}" if value >= 100 or value == int(value) else f"{value:.1f}{unit}".replace(".0", "")
    return str(n)


__all__ = ["Source", "resolve", "slug", "known", "KNOWN", "inspect_gguf", "sha256_file"]
