"""Small model files written byte by byte, for the formats no package ships a real
model in: a GGML-era GPT-2 file (random weights: it proves the format loads and
generates, not that it says anything) and GGUF headers with one flaw each."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from dragoman.backends.gguf_file import Field, TensorData, TensorInfo, ValueType, write_gguf

GGML_MAGIC = 0x67676D6C  # 'ggml'
END_OF_TEXT = "<|endoftext|>"


def write_gpt2_ggml(
    path: Path, *, n_ctx: int = 64, n_embd: int = 32, n_head: int = 2, n_layer: int = 2, seed: int = 0
) -> Path:
    """The layout of ggml's ``examples/gpt-2`` (what ctransformers' ``gpt2`` reads):
    magic, six i32 hparams, the vocabulary (256 single bytes and ``<|endoftext|>``),
    then each tensor as (n_dims, name length, type, dims…, name, f32 data)."""
    vocab = [bytes([b]) for b in range(256)] + [END_OF_TEXT.encode()]
    rng = np.random.default_rng(seed)
    with open(path, "wb") as out:
        out.write(struct.pack("<7i", GGML_MAGIC, len(vocab), n_ctx, n_embd, n_head, n_layer, 0))
        out.write(struct.pack("<i", len(vocab)))
        for token in vocab:
            out.write(struct.pack("<I", len(token)) + token)
        for name, shape in _gpt2_tensors(len(vocab), n_ctx, n_embd, n_layer):
            ones = name.endswith("/g")  # layer-norm gains
            data = np.ones(shape, np.float32) if ones else rng.normal(0, 0.2, shape).astype(np.float32)
            dims = list(reversed(shape))  # ggml lists the row length first
            raw = name.encode()
            out.write(struct.pack(f"<3i{len(dims)}i", len(dims), len(raw), 0, *dims) + raw + data.tobytes())
    return path


def _gpt2_tensors(n_vocab: int, n_ctx: int, n_embd: int, n_layer: int) -> list[tuple[str, tuple[int, ...]]]:
    tensors = [
        ("model/ln_f/g", (n_embd,)),
        ("model/ln_f/b", (n_embd,)),
        ("model/wte", (n_vocab, n_embd)),
        ("model/wpe", (n_ctx, n_embd)),
        ("model/lm_head", (n_vocab, n_embd)),
    ]
    for i in range(n_layer):
        h = f"model/h{i}"
        tensors += [
            (f"{h}/ln_1/g", (n_embd,)),
            (f"{h}/ln_1/b", (n_embd,)),
            (f"{h}/ln_2/g", (n_embd,)),
            (f"{h}/ln_2/b", (n_embd,)),
            (f"{h}/attn/c_attn/w", (3 * n_embd, n_embd)),
            (f"{h}/attn/c_attn/b", (3 * n_embd,)),
            (f"{h}/attn/c_proj/w", (n_embd, n_embd)),
            (f"{h}/attn/c_proj/b", (n_embd,)),
            (f"{h}/mlp/c_fc/w", (4 * n_embd, n_embd)),
            (f"{h}/mlp/c_fc/b", (4 * n_embd,)),
            (f"{h}/mlp/c_proj/w", (n_embd, 4 * n_embd)),
            (f"{h}/mlp/c_proj/b", (n_embd,)),
        ]
    return tensors


# -- GGUF --------------------------------------------------------------------------------

LLAMA_VOCAB = ["<unk>", "<s>", "</s>", "<0x0A>", "▁", "a", "b", "▁a"]
BPE_VOCAB = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "\n", " ", "a", "b", " a"]


def llama_gguf_parts(
    *, vocab: list[str] | None = None, tokenizer: str = "llama", layers: int = 1, n_embd: int = 32, n_head: int = 2
) -> tuple[list[Field], list[TensorInfo]]:
    """Metadata and tensor infos of a minimal GGUF the bundled llama.cpp loads: a
    test edits one thing and checks the verdict."""
    vocab = vocab or LLAMA_VOCAB
    # unknown, control, control, then normal tokens (SentencePiece's <0x0A> is a byte)
    types = [2, 3, 3] + [6 if t == "<0x0A>" else 1 for t in vocab[3:]]
    u32 = ValueType.UINT32
    fields = [
        Field("general.architecture", ValueType.STRING, "llama"),
        Field("llama.context_length", u32, 64),
        Field("llama.embedding_length", u32, n_embd),
        Field("llama.feed_forward_length", u32, 2 * n_embd),
        Field("llama.attention.head_count", u32, n_head),
        Field("llama.block_count", u32, layers),
        Field("llama.rope.dimension_count", u32, n_embd // n_head),
        Field("llama.attention.layer_norm_rms_epsilon", ValueType.FLOAT32, 1e-5),
        Field("tokenizer.ggml.model", ValueType.STRING, tokenizer),
        Field("tokenizer.ggml.tokens", ValueType.ARRAY, vocab, ValueType.STRING),
        Field("tokenizer.ggml.scores", ValueType.ARRAY, [0.0] * len(vocab), ValueType.FLOAT32),
        Field("tokenizer.ggml.token_type", ValueType.ARRAY, types, ValueType.INT32),
        Field("tokenizer.ggml.bos_token_id", u32, 1),
        Field("tokenizer.ggml.eos_token_id", u32, 2),
    ]
    if tokenizer == "gpt2":
        fields.append(Field("tokenizer.ggml.merges", ValueType.ARRAY, ["a b"], ValueType.STRING))
    n_vocab, n_ff = len(vocab), 2 * n_embd
    shapes = {
        "token_embd.weight": (n_embd, n_vocab),
        "output_norm.weight": (n_embd,),
        "output.weight": (n_embd, n_vocab),
    }
    for i in range(layers):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (n_embd,),
            f"blk.{i}.attn_q.weight": (n_embd, n_embd),
            f"blk.{i}.attn_k.weight": (n_embd, n_embd),
            f"blk.{i}.attn_v.weight": (n_embd, n_embd),
            f"blk.{i}.attn_output.weight": (n_embd, n_embd),
            f"blk.{i}.ffn_norm.weight": (n_embd,),
            f"blk.{i}.ffn_gate.weight": (n_embd, n_ff),
            f"blk.{i}.ffn_down.weight": (n_ff, n_embd),
            f"blk.{i}.ffn_up.weight": (n_embd, n_ff),
        }
    return fields, [TensorInfo(name, dims, 0, 0) for name, dims in shapes.items()]


def write_gguf_file(path: Path, fields: list[Field], tensors: list[TensorInfo], *, version: int = 2) -> Path:
    """``tensors`` filled with small random values (from one scratch file)."""
    largest = max((t.nbytes for t in tensors), default=0)
    scratch = path.with_suffix(".scratch")
    scratch.write_bytes(np.random.default_rng(0).normal(0, 0.02, largest // 4).astype(np.float32).tobytes())
    write_gguf(path, fields, [TensorData(t, scratch, 0) for t in tensors], version=version)
    scratch.unlink()
    return path
