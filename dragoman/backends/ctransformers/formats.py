"""Which model files ctransformers 0.2.27 can load, decided from the file's header
before the library touches it.

The check matters because the library's failures are poor: most end in "Failed to
create LLM" with the reason swallowed, and a GGUF written by a current llama.cpp
converter with a byte-level BPE vocabulary (SmolLM2, Qwen, Llama 3, …) crashes the
process (the bundled tokenizer dereferences a missing newline token). What it loads,
read from its sources (``models/llm.cc``, ``models/ggml/llama.cpp`` of Sep 2023):

- GGUF v1-v3 (little-endian) of architecture ``llama`` or ``falcon`` only, with
  ``tokenizer.ggml.scores`` and ``token_type``; tokenizer ``llama`` (SentencePiece)
  or ``gpt2`` with a raw-text vocabulary (as Aug-Oct 2023 converters wrote it);
  exactly the tensors of that architecture (``output.weight`` included, no biases);
  tensor types F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K.
- GGML-era files, by ``model_type``: ``ggml`` magic (gpt2, gptj, gpt_neox, dolly-v2,
  mpt, replit, starcoder, falcon, llama), ``ggmf``/``ggjt`` v1-3 (llama, falcon),
  ``ggcc`` (falcon).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import msgspec

from dragoman.backends.gguf_file import GgufError, GgufFile, TensorInfo, read_gguf

# model_type values as the library spells them; it drops every non-alphanumeric char.
GGML_MODEL_TYPES = (
    "gpt2",
    "gptj",
    "gpt_neox",
    "dolly-v2",
    "mpt",
    "replit",
    "starcoder",
    "gpt_bigcode",
    "falcon",
    "llama",
)
LOADABLE_TENSOR_TYPES = frozenset({0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14})
GGUF_ARCHITECTURES = ("llama", "falcon")
_CONTROL, _USER_DEFINED, _NORMAL = 3, 4, 1

SUPPORTED_FORMATS = (
    "ctransformers 0.2.27 loads GGUF v1-v3 files of the llama or falcon architecture as llama.cpp "
    "converters wrote them in Aug-Oct 2023 (tokenizer scores present; a SentencePiece vocabulary or a "
    "raw-text GPT-2 one; tensor types F32/F16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q2_K-Q6_K), and GGML-era files "
    "with model_type set (gpt2, gptj, gpt_neox, dolly-v2, mpt, replit, starcoder, falcon, llama)"
)
ALTERNATIVES = (
    "for a current GGUF use an Ollama upstream (backend: ollama) or the onnx backend "
    "(`dragoman models prepare smollm2` builds the default SmolLM2 model)"
)
CONVERTIBLE_HINT = (
    "this llama-architecture GGUF can be rewritten into a layout ctransformers loads with "
    "`python -m dragoman.backends.ctransformers.convert SOURCE TARGET`"
)


def normalize(model_type: str) -> str:
    """The library's spelling test: ``gpt_neox`` and ``gpt-neox`` are ``gptneox``."""
    return re.sub(r"[^0-9A-Za-z]", "", model_type)


class UnsupportedModelFile(ValueError):
    """The file is not one ctransformers 0.2.27 loads; the message says why and what works."""


Container = Literal["gguf", "ggml", "ggmf", "ggjt", "ggcc"]
GgmlContainer = Literal["ggml", "ggmf", "ggjt", "ggcc"]
# The magic is a little-endian u32, so 'ggml' reads back as b"lmgg".
_GGML_MAGICS: dict[bytes, GgmlContainer] = {b"lmgg": "ggml", b"fmgg": "ggmf", b"tjgg": "ggjt", b"ccgg": "ggcc"}


class ModelFile(msgspec.Struct, frozen=True):
    """What the backend needs to know about a model file before and after loading."""

    path: str
    container: Container
    model_type: str  # what to pass to the library
    size: int
    version: int = 0
    architecture: str = ""
    tokenizer: str = ""  # "llama" (SentencePiece) or "gpt2" (BPE); GGUF only
    context_length: int | None = None  # the training context, when the file says
    add_bos: bool = False
    special_tokens: dict[str, int] = {}  # control and user-defined token texts → ids
    end_tokens: frozenset[int] = frozenset()  # control tokens that end a reply
    chat_template: str | None = None
    bos_text: str | None = None  # for chat templates that write {{ bos_token }}
    eos_text: str | None = None
    quantization: str = ""
    parameters: int = 0
    # Bytes of the longest token's spelling (at least its text's bytes); 0: unknown.
    longest_token_bytes: int = 0
    embedding_length: int | None = None


def inspect_model_file(path: str | Path, model_type: str | None) -> ModelFile:
    """The facts of ``path``; raises :class:`UnsupportedModelFile` when the library
    cannot load it (and ``FileNotFoundError`` when it is missing)."""
    path = Path(path).expanduser()
    with open(path, "rb") as file:
        head = file.read(8)
    size = path.stat().st_size
    if head[:4] == b"GGUF":
        try:
            gguf = read_gguf(path)
        except GgufError as exc:
            raise _unsupported(path, str(exc)) from None
        return _gguf_facts(path, gguf, size)
    container = _GGML_MAGICS.get(head[:4])
    if container is None:
        raise _unsupported(path, f"it is neither GGUF nor a GGML-era file (first bytes {head[:4]!r})")
    allowed = {"ggml": GGML_MODEL_TYPES, "ggmf": ("llama", "falcon"), "ggjt": ("llama", "falcon"), "ggcc": ("falcon",)}
    allowed_types = allowed[container]
    if model_type is None:
        if len(allowed_types) == 1:
            model_type = allowed_types[0]
        else:
            raise _unsupported(
                path,
                f"a '{container}' file does not say its architecture: set model_type to one of "
                + ", ".join(allowed_types),
                hint=False,
            )
    if normalize(model_type) not in {normalize(t) for t in allowed_types}:
        raise _unsupported(
            path, f"model_type '{model_type}' cannot read a '{container}' file (it takes {', '.join(allowed_types)})"
        )
    version = int.from_bytes(head[4:8], "little") if container != "ggml" else 0
    return ModelFile(str(path), container, model_type, size, version=version, architecture=normalize(model_type))


def _gguf_facts(path: Path, gguf: GgufFile, size: int) -> ModelFile:
    problems = gguf_problems(gguf)
    if problems:
        convertible = all(p.convertible for p in problems)
        raise _unsupported(path, "; ".join(p.text for p in problems), convertible=convertible)
    arch = gguf.get("general.architecture")
    tokens: list[str] = gguf.get("tokenizer.ggml.tokens")
    types: list[int] = gguf.get("tokenizer.ggml.token_type")
    special = {tokens[i]: i for i, kind in enumerate(types) if kind in (_CONTROL, _USER_DEFINED)}
    tokenizer = gguf.get("tokenizer.ggml.model")
    eos = gguf.get("tokenizer.ggml.eos_token_id")
    bos = gguf.get("tokenizer.ggml.bos_token_id")
    # A reply ends at EOS or any control token other than BOS (ChatML's <|im_start|>
    # or <|endoftext|> after <|im_end|> both mean the model is done).
    end_tokens = frozenset(i for i, kind in enumerate(types) if kind == _CONTROL and i != bos) | (
        {eos} if eos is not None else set()
    )
    return ModelFile(
        str(path),
        "gguf",
        "gguf",
        size,
        version=gguf.version,
        architecture=arch,
        tokenizer=tokenizer,
        context_length=gguf.get(f"{arch}.context_length"),
        add_bos=bool(gguf.get("tokenizer.ggml.add_bos_token", tokenizer == "llama")),
        special_tokens=special,
        end_tokens=end_tokens,
        chat_template=gguf.get("tokenizer.chat_template"),
        bos_text=tokens[bos] if bos is not None and 0 <= bos < len(tokens) else None,
        eos_text=tokens[eos] if eos is not None and 0 <= eos < len(tokens) else None,
        quantization=_main_type(gguf.tensors),
        parameters=sum(_elements(t) for t in gguf.tensors if t.name != "output.weight"),
        longest_token_bytes=max((len(t.encode("utf-8", errors="surrogatepass")) for t in tokens), default=0),
        embedding_length=gguf.get(f"{arch}.embedding_length"),
    )


class Problem(msgspec.Struct, frozen=True):
    text: str
    convertible: bool = False  # fixed by :mod:`backends.ctransformers.convert`


def gguf_problems(gguf: GgufFile) -> list[Problem]:
    """Why the bundled llama.cpp would not load ``gguf`` (empty: it loads)."""
    arch = gguf.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        return [Problem(f"its architecture is '{arch}'; GGUF support covers only llama and falcon")]
    # Version 3 needs no check: it differs from 2 only for big-endian files, which
    # the reader already refused.
    return _hparam_problems(gguf, arch) + _tokenizer_problems(gguf) + _tensor_problems(gguf, arch)


def _hparam_problems(gguf: GgufFile, arch: str) -> list[Problem]:
    problems = []
    required = ["context_length", "embedding_length", "feed_forward_length", "attention.head_count", "block_count"]
    for key in required:
        field = gguf.fields.get(f"{arch}.{key}")
        if field is None or field.type != 4:  # u32, or the loader throws "wrong type"
            problems.append(Problem(f"'{arch}.{key}' is missing or not a u32"))
    eps = "attention.layer_norm_rms_epsilon" if arch == "llama" else "attention.layer_norm_epsilon"
    if f"{arch}.{eps}" not in gguf.fields:
        problems.append(Problem(f"'{arch}.{eps}' is missing"))
    heads, embd = gguf.get(f"{arch}.attention.head_count"), gguf.get(f"{arch}.embedding_length")
    rot = gguf.get(f"{arch}.rope.dimension_count")
    if heads and embd and rot is not None and rot != embd // heads:
        problems.append(Problem(f"its rope dimension ({rot}) is not embedding_length / head_count ({embd // heads})"))
    return problems


def _tokenizer_problems(gguf: GgufFile) -> list[Problem]:
    tokenizer = gguf.get("tokenizer.ggml.model")
    tokens = gguf.get("tokenizer.ggml.tokens")
    if tokenizer not in ("llama", "gpt2"):
        return [Problem(f"its tokenizer is '{tokenizer}'; only 'llama' (SentencePiece) and 'gpt2' (BPE) load")]
    if not tokens:
        return [Problem("it has no tokenizer.ggml.tokens")]
    problems = []
    if "tokenizer.ggml.token_type" not in gguf.fields:
        problems.append(Problem("it has no tokenizer.ggml.token_type"))
    if "tokenizer.ggml.scores" not in gguf.fields:
        problems.append(Problem("it has no tokenizer.ggml.scores (current converters omit them for BPE)", True))
    # The loader looks up the newline token: a missing one is an exception for
    # SentencePiece ("<0x0A>") and a crash for BPE ("\n").
    if tokenizer == "llama" and "<0x0A>" not in tokens:
        problems.append(Problem("its SentencePiece vocabulary has no <0x0A> byte token"))
    if tokenizer == "gpt2":
        if "tokenizer.ggml.merges" not in gguf.fields:
            problems.append(Problem("its BPE tokenizer has no merges"))
        if is_byte_level_vocab(tokens):
            problems.append(
                Problem("its BPE vocabulary is byte-level encoded ('Ġ' for space), which crashes this tokenizer", True)
            )
        elif "\n" not in tokens:
            problems.append(Problem("its BPE vocabulary has no newline token, which crashes this tokenizer"))
    return problems


def is_byte_level_vocab(tokens: list[str]) -> bool:
    """GPT-2 style byte-level tokens ('Ġthe', 'Ċ') rather than raw text (' the', '\\n')."""
    return "\n" not in tokens and ("Ċ" in tokens or any(t.startswith("Ġ") for t in tokens[:5000]))


def _tensor_problems(gguf: GgufFile, arch: str) -> list[Problem]:
    problems = []
    bad_types = sorted({t.type_name for t in gguf.tensors if t.type not in LOADABLE_TENSOR_TYPES})
    if bad_types:
        problems.append(Problem(f"it holds tensor types this ggml predates: {', '.join(bad_types)}"))
    names = {t.name for t in gguf.tensors}
    layers = gguf.get(f"{arch}.block_count") or 0
    expected = expected_tensors(arch, layers, falcon_40b="blk.0.attn_norm_2.weight" in names)
    if "output.weight" not in names and "token_embd.weight" in names:
        problems.append(Problem("it has no output.weight (tied embeddings), which this llama.cpp requires", True))
        names = names | {"output.weight"}
    missing, extra = sorted(expected - names), sorted(names - expected)
    if missing:
        problems.append(Problem(f"tensors this architecture needs are missing: {', '.join(missing[:4])}"))
    if extra:
        problems.append(Problem(f"it holds tensors this llama.cpp does not know: {', '.join(extra[:4])}"))
    return problems


def expected_tensors(arch: str, layers: int, *, falcon_40b: bool = False) -> set[str]:
    """Every tensor name the bundled llama.cpp creates for ``arch``; a file must hold
    exactly these ("wrong number of tensors" otherwise)."""
    if arch == "llama":
        top = {"token_embd.weight", "output_norm.weight", "output.weight"}
        per_layer = [
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_down",
            "ffn_up",
        ]
        return top | {f"blk.{i}.{name}.weight" for i in range(layers) for name in per_layer}
    top = {"token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight"}
    per_layer = [
        "attn_norm.weight",
        "attn_norm.bias",
        "attn_qkv.weight",
        "attn_output.weight",
        "ffn_up.weight",
        "ffn_down.weight",
    ]
    if falcon_40b:
        per_layer += ["attn_norm_2.weight", "attn_norm_2.bias"]
    return top | {f"blk.{i}.{name}" for i in range(layers) for name in per_layer}


def _main_type(tensors: list[TensorInfo]) -> str:
    counts: dict[str, int] = {}
    for tensor in tensors:
        if len(tensor.dims) > 1:
            counts[tensor.type_name] = counts.get(tensor.type_name, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else ""


def _elements(tensor: TensorInfo) -> int:
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count


def _unsupported(path: Path, reason: str, *, hint: bool = True, convertible: bool = False) -> UnsupportedModelFile:
    text = f"{path}: ctransformers cannot load this file: {reason}."
    if convertible:
        text += f" {CONVERTIBLE_HINT[0].upper()}{CONVERTIBLE_HINT[1:]}."
    if hint:
        text += f" {SUPPORTED_FORMATS}; {ALTERNATIVES}."
    return UnsupportedModelFile(text)
