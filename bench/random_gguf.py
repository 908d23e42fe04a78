"""Random-weight GGUFs in the shapes of real models, written tensor by tensor (never the
whole model in memory), quantized as Q8_0 or Q4_0 with gguf-py: what a pulled GGUF of
that model costs to build, without the weights (nothing here reaches a hub).

    python bench/random_gguf.py qwen2.5-0.5b Q8_0 OUT.gguf
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Shape:
    name: str
    arch: str  # GGUF general.architecture
    config_class: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool = True
    rope_theta: float = 1000000.0

    def config(self, tokens: dict[str, int]) -> Any:
        import transformers

        return getattr(transformers, self.config_class)(
            vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            max_position_embeddings=32768, tie_word_embeddings=self.tied, rope_theta=self.rope_theta,
            bos_token_id=tokens["<|endoftext|>"], eos_token_id=tokens["<|im_end|>"], pad_token_id=tokens["<|endoftext|>"],
        )  # fmt: skip


SHAPES = {
    s.name: s
    for s in (
        Shape("qwen2.5-0.5b", "qwen2", "Qwen2Config", 896, 4864, 24, 14, 2, 151936),
        Shape("qwen2.5-1.5b", "qwen2", "Qwen2Config", 1536, 8960, 28, 12, 2, 151936),
        Shape("llama-3.2-3b", "llama", "LlamaConfig", 3072, 8192, 28, 24, 8, 128256, rope_theta=500000.0),
    )
}
ROWS_PER_CHUNK = 4096  # rows generated and quantized at a time


def parameters(shape: Shape) -> int:
    return sum(math.prod(s) for _, s in _tensors(shape))


def _tensors(shape: Shape, config: Any = None) -> list[tuple[str, tuple[int, ...]]]:
    """(HF name, shape) of every weight, from the model built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.prepare.tiny_models import train_tokenizer

    if config is None:
        config = shape.config(train_tokenizer().get_vocab())
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [(n, tuple(t.shape)) for n, t in model.state_dict().items() if not (shape.tied and n == "lm_head.weight")]


def write(shape: Shape, qtype_name: str, path: Path, seed: int = 0) -> Path:
    import gguf
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    from tests.prepare.tiny_models import CHATML, _arch_enum, _hf_value, _write_tokenizer, train_tokenizer

    raw = train_tokenizer()
    config = shape.config(raw.get_vocab())
    qtype = gguf.GGMLQuantizationType[qtype_name]
    writer = gguf.GGUFWriter(str(path), shape.arch)
    writer.add_name(f"random {shape.name}")
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{qtype_name}"])
    for gguf_key, hf_key in GGUF_CONFIG_MAPPING[shape.arch].items():
        value = _hf_value(config, hf_key) if isinstance(hf_key, str) else None
        if value is None or hf_key == "vocab_size" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        key = f"{shape.arch}.{gguf_key}"
        writer.add_uint32(key, value) if isinstance(value, int) else writer.add_float32(key, value)
    _write_tokenizer(writer, raw, config, CHATML)
    names = gguf.get_tensor_name_map(_arch_enum(shape.arch), shape.layers)
    plan = []
    for hf_name, dims in _tensors(shape, config):
        base, suffix = hf_name.rsplit(".", 1)
        quantized = len(dims) == 2
        kind = qtype if quantized else gguf.GGMLQuantizationType.F32
        nbytes = math.prod(gguf.quants.quant_shape_to_byte_shape(dims, kind)) if quantized else 4 * math.prod(dims)
        name = f"{names.get_name(base)}.{suffix}"
        plan.append((name, dims, quantized))
        if quantized:
            writer.add_tensor_info(name, gguf.quants.quant_shape_to_byte_shape(dims, kind), np.dtype(np.uint8), nbytes, raw_dtype=kind)
        else:
            writer.add_tensor_info(name, dims, np.dtype(np.float32), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, dims, quantized in plan:
        if not quantized:  # norms near 1, biases near 0
            data = (rng.random(dims, dtype=np.float32) * 0.5 + (0.75 if "norm" in name else -0.25)).astype(np.float32)
            writer.write_tensor_data(data)
            continue
        rows, cols = dims
        out = np.empty(gguf.quants.quant_shape_to_byte_shape(dims, qtype), dtype=np.uint8)
        for start in range(0, rows, ROWS_PER_CHUNK):
            stop = min(rows, start + ROWS_PER_CHUNK)
            chunk = rng.standard_normal((stop - start, cols), dtype=np.float32) * 0.02
            out[start:stop] = gguf.quants.quantize(chunk, qtype)
        writer.write_tensor_data(out)
        del out
    writer.close()
    return path


if __name__ == "__main__":
    shape = SHAPES[sys.argv[1]]
    print(write(shape, sys.argv[2], Path(sys.argv[3])), f"{parameters(shape) / 1e6:.0f}M parameters")
