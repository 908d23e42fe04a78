"""What an embedding model folder says about itself, read without loading weights.

Two kinds of folder embed:

- an encoder export (BERT-style, e.g. a sentence-transformers model exported to ONNX):
  ``model.onnx`` with ``input_ids``/``attention_mask`` in and ``last_hidden_state``
  out, the model's ``tokenizer.json``, and its own pooling in ``1_Pooling/config.json``
  (mean or CLS), ``modules.json`` (whether it normalises) and
  ``sentence_bert_config.json`` (its ``max_seq_length``);
- a decoder (chat model) export whose graph outputs ``hidden_states``, the final
  normed hidden state (the ONNX Runtime GenAI builder's ``include_hidden_states`` or
  ``exclude_lm_head``), pooled at the last token.

Output names are read from the ONNX protobuf directly (a few fields of ``ModelProto``),
since the ``onnx`` package is a build-time tool, not a server dependency.
"""

from __future__ import annotations

import functools
import json
import mmap
from pathlib import Path
from typing import Any, Literal

import msgspec

from dragoman.backends.onnx.model_facts import _json

Pooling = Literal["mean", "cls", "last"]
PoolingChoice = Literal["auto", "mean", "cls", "last"]


class EmbeddingFacts(msgspec.Struct, frozen=True):
    onnx_file: str
    pooling: Pooling
    normalizes: bool  # the model's own pipeline ends in L2 normalisation
    max_length: int | None
    dimensions: int | None
    family: str
    head_size: int | None = None  # a decoder's, for its (empty) past key/value inputs
    parameter_size: str = ""
    quantization_level: str = ""
    size: int = 0


def onnx_file(folder: Path) -> Path | None:
    """The graph to run: ``model.onnx``, else ``onnx/model.onnx`` (optimum's layout)."""
    for candidate in (folder / "model.onnx", folder / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    return None


def graph_outputs(path: Path) -> list[str]:
    """Names of the graph's outputs (``ModelProto.graph`` field 7, ``GraphProto.output``
    field 12, ``ValueInfoProto.name`` field 1); [] when the file cannot be read."""
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            graph = _field(data, 0, len(data), 7)
            if graph is None:
                return []
            names = []
            for start, end in _fields(data, graph[0], graph[1], 12):
                name = _field(data, start, end, 1)
                if name is not None:
                    names.append(bytes(data[name[0] : name[1]]).decode("utf-8", "replace"))
            return names
    except (OSError, ValueError, IndexError):
        return []


def has_hidden_states(folder: Path) -> bool:
    """Whether the folder's graph outputs ``hidden_states`` (cached per file version:
    chat requests ask on every capability check)."""
    path = onnx_file(folder)
    if path is None:
        return False
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return False
    return _outputs_hidden_states(str(path), stamp)


@functools.lru_cache(maxsize=64)
def _outputs_hidden_states(path: str, stamp: int) -> bool:
    return "hidden_states" in graph_outputs(Path(path))


def read_facts(folder: Path, pooling: PoolingChoice, configured_context: int | None) -> EmbeddingFacts:
    """The facts of ``folder``; ``pooling`` ``auto`` takes the model's own choice."""
    path = onnx_file(folder)
    if path is None:
        raise FileNotFoundError(f"{folder} holds no model.onnx")
    config = _json(folder / "config.json")
    genai = _json(folder / "genai_config.json").get("model") or {}
    marker = _json(folder / "dragoman-model.json")
    decoder = bool(genai) or "hidden_states" in graph_outputs(path)
    chosen: Pooling = _pooling_from_config(folder, decoder) if pooling == "auto" else pooling
    modules = _json_list(folder / "modules.json")
    normalizes = any(str(m.get("type", "")).endswith("Normalize") for m in modules if isinstance(m, dict))
    st_config = _json(folder / "sentence_bert_config.json")
    limits = [
        st_config.get("max_seq_length"),
        config.get("max_position_embeddings") if not st_config.get("max_seq_length") else None,
        genai.get("context_length"),
        configured_context,
    ]
    known = [int(v) for v in limits if isinstance(v, int) and v > 0]
    dims = config.get("hidden_size") or (genai.get("decoder") or {}).get("hidden_size")
    return EmbeddingFacts(
        onnx_file=str(path),
        pooling=chosen,
        normalizes=normalizes,
        max_length=min(known) if known else None,
        dimensions=int(dims) if isinstance(dims, int) else None,
        family=str(marker.get("family") or config.get("model_type") or genai.get("type") or ""),
        head_size=(genai.get("decoder") or {}).get("head_size"),
        parameter_size=str(marker.get("parameter_size") or ""),
        quantization_level=str(marker.get("quantization_level") or ""),
        size=sum(f.stat().st_size for f in path.parent.iterdir() if f.is_file() and f.suffix in (".onnx", ".data")),
    )


def _pooling_from_config(folder: Path, decoder: bool) -> Pooling:
    """sentence-transformers' ``1_Pooling/config.json`` decides; a decoder without one
    pools its last token (the only position that has attended to every input token
    under causal attention, and what Ollama's runner returned for models without a
    pooling type: ``llama_get_embeddings_ith`` of the last prompt token); an encoder
    without one takes the masked mean."""
    config = _json(folder / "1_Pooling" / "config.json")
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_lasttoken"):
        return "last"
    return "last" if decoder else "mean"


def _json_list(path: Path) -> list[Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return value if isinstance(value, list) else []


# -- a protobuf reader just big enough for graph output names ------------------------------


def _varint(data: Any, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(data: Any, start: int, end: int, wanted: int) -> list[tuple[int, int]]:
    """(start, end) of every length-delimited field ``wanted`` in ``data[start:end]``."""
    found = []
    pos = start
    while pos < end:
        key, pos = _varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == 0:
            _, pos = _varint(data, pos)
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        elif kind == 2:
            length, pos = _varint(data, pos)
            if number == wanted:
                found.append((pos, pos + length))
            pos += length
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
    if pos != end:
        raise ValueError("truncated protobuf message")
    return found


def _field(data: Any, start: int, end: int, wanted: int) -> tuple[int, int] | None:
    found = _fields(data, start, end, wanted)
    return found[0] if found else None
