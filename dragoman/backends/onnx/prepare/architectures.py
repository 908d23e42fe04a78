"""What ``prepare`` can build: the architectures both halves of the path handle in
the installed versions (transformers 5.x reading GGUF, onnxruntime-genai 0.18's
builder), each checked by a logits test on a tiny random-weight model
(tests/prepare/test_architectures.py), and the provider × precision pairs the builder
makes. Everything else is refused before any work, with the reason.
"""

from __future__ import annotations

from typing import Literal

BuildProvider = Literal["cpu", "cuda", "dml"]
Precision = Literal["int4", "fp16", "fp32"]

# The builder's own list of valid pairs, less int8 / bf16 / WebGPU / TensorRT-RTX.
PRECISIONS: dict[str, tuple[str, ...]] = {"cpu": ("int4", "fp32"), "cuda": ("int4", "fp16", "fp32"), "dml": ("int4", "fp16")}

# GGUF general.architecture → the transformers class it loads as.
GGUF_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",  # also Mistral: llama.cpp writes Mistral 7B as llama
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "phi3": "Phi3ForCausalLM",  # Phi-3, Phi-3.5-mini and Phi-4-mini (LongRoPE, partial rotary)
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",  # text-only (Gemma 3 270M/1B); see GGUF_LIMITS
    "nemotron": "NemotronForCausalLM",
    "lfm2": "Lfm2ForCausalLM",
}

# GGUF architectures the streaming build (backends/onnx/prepare/streaming.py) reads layer
# by layer: those transformers reads through its classic GGUF reader, one tensor at a
# time. The others are built through a float32 Hugging Face folder, with the reason.
FULL_MODEL_GGUF: dict[str, str] = {
    "lfm2": "transformers reads LFM2 GGUFs through its newer loader, which the streaming build does not reproduce",
}

# Hugging Face config.json architectures[0] the builder takes from a folder.
HF_ARCHITECTURES: frozenset[str] = frozenset(
    {*GGUF_ARCHITECTURES.values(), "MistralForCausalLM", "GraniteForCausalLM"}
)

# Architectures transformers reads from GGUF but the builder cannot build (or the
# other way round), with what to do instead.
REFUSED_GGUF: dict[str, str] = {
    "granite": "transformers cannot read Granite GGUF files; prepare the model from its Hugging Face folder",
    "qwen2moe": "onnxruntime-genai's builder has no Qwen2-MoE; serve it through an Ollama upstream (backend: ollama)",
    "qwen3moe": "onnxruntime-genai's builder has no Qwen3-MoE; serve it through an Ollama upstream (backend: ollama)",
    "gpt-oss": "onnxruntime-genai's builder makes GPT-OSS only from its MXFP4 Hugging Face checkpoint",
    "gemma4": "transformers reads Gemma 4 GGUF as text-only, which the builder does not take; use the Hugging Face folder",
    "qwen35": "the builder takes Qwen 3.5 only as the multimodal Hugging Face checkpoint",
}

# ggml tensor types by id, and those transformers' GGUF reader dequantizes (gguf-py's
# numpy code, checked against gguf 0.19: Q8_1, Q8_K, the integer types, F64 and Q1_0
# raise NotImplementedError there).
GGML_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
    11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
    19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
    27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0",
}  # fmt: skip
DEQUANTIZABLE: frozenset[int] = frozenset({0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 21, 22, 23, 29, 30, 34, 35, 39, 40})


def check_target(provider: str, precision: str) -> str | None:
    """Why this pair cannot be built, or None."""
    if provider not in PRECISIONS:
        return f"provider must be one of {', '.join(PRECISIONS)}, not {provider!r}"
    if precision not in PRECISIONS[provider]:
        return (f"the builder makes {', '.join(PRECISIONS[provider])} for {provider}, not {precision!r}"
                f"{' (fp16 is a GPU precision: use int4 or fp32 on cpu)' if provider == 'cpu' else ''}")  # fmt: skip
    return None
