"""The heavy half of a build, run as its own process (``python -m
backends.onnx.prepare.worker SPEC.json``) so its memory is measured alone and returned
to the system when it ends, and so a server that builds on first use never imports
torch: GGUF → Hugging Face folder through transformers (which dequantizes), then
onnxruntime-genai's model builder, in one interpreter (torch and transformers are
imported once, not once per stage). With ``stream`` the folder holds only the tokenizer
and config, and the builder reads the weights from the GGUF one layer at a time
(:mod:`.streaming`).

Progress goes to stderr as lines the parent parses: ``@stage NAME`` and ``@progress
DONE TOTAL UNIT``; the libraries' own output passes through after them.
"""

from __future__ import annotations

import json
import math
import os
import runpy
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def emit(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


# -- GGUF → Hugging Face folder ----------------------------------------------------------


def convert_gguf(gguf: Path, out: Path, extra_eos: list[str], *, weights: bool = True) -> Any:
    """A folder the builder reads: tokenizer, plain config, and (unless ``weights`` is
    false, for the streaming build) the float32 weights. Returns the model's config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from dragoman.backends.gguf_file import read_gguf

    header = read_gguf(gguf)
    if weights:
        emit("@stage convert dequantizing the GGUF into a Hugging Face folder (transformers)")
    else:
        emit("@stage convert reading the GGUF's tokenizer and configuration (weights are read layer by layer later)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    for note in fix_config(config, header, gguf):
        emit(f"@note {note}")
    if weights:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, config=config, dtype=torch.float32)
    else:
        from dragoman.backends.onnx.prepare.streaming import meta_model

        model = meta_model(config)
    packed = [name for name, module in model.named_modules() if type(module).__name__.startswith("Gguf")]
    if packed:
        raise SystemExit(f"error: transformers kept {len(packed)} layers packed in GGUF blocks (e.g. {packed[0]}); "
                         "uninstall the 'kernels' package so it dequantizes, then run prepare again")
    out.mkdir(parents=True)
    tokenizer.save_pretrained(out)
    if weights:
        _save_weights(model, out)
    config_dict = model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict["architectures"] = [type(model).__name__]
    config_dict["torch_dtype"] = config_dict["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(config_dict, indent=2))
    generation = GenerationConfig(**{k: v for k, v in model.generation_config.to_dict().items() if not k.startswith("_")})
    generation.eos_token_id = stop_token_ids(header, tokenizer, config_dict.get("eos_token_id"), extra_eos)
    generation.save_pretrained(out)
    return model.config


def _save_weights(model: Any, out: Path) -> None:
    from safetensors.torch import save_file

    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    # save_pretrained refuses a GGUF-loaded model; a tied lm_head is the embedding
    # matrix again (and safetensors refuses shared tensors anyway).
    weights = {k: v.contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})


def stop_token_ids(header: Any, tokenizer: Any, eos: Any, extra_eos: list[str]) -> list[int]:
    """Every id generation must stop on: the GGUF's eos, end-of-turn and end-of-message
    tokens, and the stop strings (Ollama params) that are one special token each."""
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        value = header.get(key)
        if isinstance(value, int):
            ids.append(value)
    vocab = tokenizer.get_vocab()
    special = set(tokenizer.all_special_tokens) | {t.content for t in tokenizer.added_tokens_decoder.values()}
    ids.extend(vocab[text] for text in extra_eos if text in vocab and text in special)
    return list(dict.fromkeys(ids))


def fix_config(config: Any, header: Any, path: Path) -> list[str]:
    """Set what the GGUF states but transformers' GGUF reader (5.x) does not carry over,
    the way llama.cpp reads the same keys. Returns a note per change."""
    arch = header.get("general.architecture")
    notes = []

    def key(name: str) -> Any:
        return header.get(f"{arch}.{name}")

    head_dim = key("attention.key_length")
    natural = config.hidden_size // config.num_attention_heads
    if isinstance(head_dim, int) and getattr(config, "head_dim", natural) != head_dim:
        config.head_dim = head_dim
        notes.append(f"head_dim {head_dim} (attention.key_length)")
    if arch == "gemma2":
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            if isinstance(key(name), float):
                setattr(config, name, key(name))
    if arch in ("gemma2", "gemma3"):
        # llama.cpp scales attention by 1/sqrt(head_dim), except Gemma 2 27B (46 layers),
        # where it is 1/sqrt(hidden/heads); the GGUF has no key for it.
        config.query_pre_attn_scalar = natural if (arch == "gemma2" and config.num_hidden_layers == 46) else config.head_dim
    if arch == "llama":
        notes.extend(_llama3_rope(config, header, path))
    if arch == "phi3":
        notes.extend(_phi3_rope(config, header, path))
    return notes


def _phi3_rope(config: Any, header: Any, path: Path) -> list[str]:
    """Phi-3/Phi-4-mini: a partial rotary width (rope.dimension_count) and LongRoPE's
    factors as ``rope_factors_long``/``_short`` tensors, which transformers ignores —
    without them the builder takes the model for a LongRoPE one anyway (its
    max_position_embeddings differ from the default original_max_position_embeddings)."""
    notes = []
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rotary = header.get("phi3.rope.dimension_count")
    if isinstance(rotary, int) and rotary != head_dim:
        config.partial_rotary_factor = rotary / head_dim
        rope = dict(getattr(config, "rope_parameters", None) or {})
        rope["partial_rotary_factor"] = rotary / head_dim
        config.rope_parameters = rope
        notes.append(f"partial rotary factor {rotary / head_dim:g} (rope.dimension_count)")
    tensors = {t.name: t for t in header.tensors}
    if "rope_factors_long.weight" in tensors:
        original = header.get("phi3.rope.scaling.original_context_length")
        if not isinstance(original, int):
            raise SystemExit("error: this Phi-3 GGUF has LongRoPE factors but no rope.scaling.original_context_length")
        rope = dict(getattr(config, "rope_parameters", None) or {})
        rope.update(rope_type="longrope", original_max_position_embeddings=original,
                    long_factor=_read_f32(path, header, tensors["rope_factors_long.weight"]).tolist(),
                    short_factor=_read_f32(path, header, tensors["rope_factors_short.weight"]).tolist())  # fmt: skip
        config.rope_parameters = rope
        config.original_max_position_embeddings = original
        notes.append(f"LongRoPE from {original} positions (rope_factors tensors)")
    else:
        config.original_max_position_embeddings = config.max_position_embeddings
    return notes


def _llama3_rope(config: Any, header: Any, path: Path) -> list[str]:
    """Llama 3.1+ GGUFs carry their rope scaling as a ``rope_freqs`` tensor, which
    transformers ignores. Recompute it from Llama 3's scaling with the factor it shows
    and use that scaling only if it reproduces the tensor exactly; refuse otherwise."""
    info = next((t for t in header.tensors if t.name == "rope_freqs.weight"), None)
    if info is None:
        return []
    import numpy as np

    stored = _read_f32(path, header, info)
    theta = float(header.get("llama.rope.freq_base") or 10000.0)
    dim = int(header.get("llama.rope.dimension_count") or config.head_dim)
    factor = float(stored.max())
    scaling: dict[str, Any] = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}  # fmt: skip
    if not np.allclose(_llama3_factors(theta, dim, scaling), stored, rtol=1e-5, atol=1e-6):
        raise SystemExit("error: this GGUF's rope_freqs tensor is not Llama 3's rope scaling, and transformers "
                         "cannot carry it; prepare the model from its Hugging Face folder instead")
    config.rope_parameters = {**(getattr(config, "rope_parameters", None) or {}), "rope_theta": theta, **scaling}
    return [f"Llama 3 rope scaling, factor {factor:g} (from the rope_freqs tensor)"]


def _llama3_factors(theta: float, dim: int, scaling: dict[str, float]) -> Any:
    """llama.cpp's convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors."""
    import numpy as np

    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    low_wavelen = scaling["original_max_position_embeddings"] / scaling["low_freq_factor"]
    high_wavelen = scaling["original_max_position_embeddings"] / scaling["high_freq_factor"]
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(scaling["factor"])
        else:
            smooth = (scaling["original_max_position_embeddings"] / wavelen - scaling["low_freq_factor"]) / (
                scaling["high_freq_factor"] - scaling["low_freq_factor"]
            )
            factors.append(1 / ((1 - smooth) / scaling["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def _read_f32(path: Path, header: Any, info: Any) -> Any:
    import numpy as np

    if info.type != 0:
        raise SystemExit(f"error: {info.name} is {info.type_name}, expected F32")
    with path.open("rb") as f:
        f.seek(header.data_offset + info.offset)
        return np.frombuffer(f.read(4 * math.prod(info.dims)), dtype="<f4")


# -- the builder ---------------------------------------------------------------------------


def run_builder(hf_dir: Path, out: Path, cache: Path, precision: str, provider: str, extra: dict[str, str]) -> None:
    """``python -m onnxruntime_genai.models.builder`` in this interpreter."""
    layers = json.loads((hf_dir / "config.json").read_text()).get("num_hidden_layers", 0)
    emit(f"@layers {layers}")
    emit(f"@stage build building the {precision} ONNX model for {provider} (onnxruntime-genai builder)")
    argv = ["builder", "-i", str(hf_dir), "-o", str(out), "-p", precision, "-e", provider, "-c", str(cache)]
    if extra:
        argv += ["--extra_options", *(f"{k}={v}" for k, v in extra.items())]
    import transformers

    saved, load_config = sys.argv, transformers.AutoConfig.from_pretrained
    sys.argv = argv
    transformers.AutoConfig.from_pretrained = lambda *a, **k: builder_config(load_config(*a, **k))  # type: ignore[method-assign]
    try:
        runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)
    finally:
        sys.argv, transformers.AutoConfig.from_pretrained = saved, load_config  # type: ignore[method-assign]
    if not (out / "genai_config.json").is_file():
        raise SystemExit(f"error: the builder finished but wrote no genai_config.json into {out}")



def builder_config(config: Any) -> Any:
    """Respell, for the builder only, what the builder (0.18) reads under other names:
    Gemma 3's per-layer-type rope thetas flat (transformers 5 nests them), Phi-3's
    LongRoPE as ``type`` (transformers 5 says ``rope_type``), and the norm epsilon as
    ``rms_norm_eps`` only (Nemotron's ``norm_eps`` silently became 1e-6, a logits error
    of ~1e-3). The logits tests check each."""
    rope = getattr(config, "rope_parameters", None)
    if getattr(config, "model_type", "") == "gemma3_text" and isinstance(rope, dict) and "full_attention" in rope:
        config.rope_local_base_freq = rope["sliding_attention"]["rope_theta"]
        config.rope_parameters = rope = dict(rope["full_attention"])
    if isinstance(rope, dict) and "rope_type" in rope and "type" not in rope:
        rope["type"] = rope["rope_type"]
    if getattr(config, "rms_norm_eps", None) is None and isinstance(getattr(config, "norm_eps", None), float):
        config.rms_norm_eps = config.norm_eps
    return config


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    hf_dir = Path(spec["hf_dir"])
    if spec.get("gguf"):
        stream = bool(spec.get("stream"))
        config = convert_gguf(Path(spec["gguf"]), hf_dir, spec.get("extra_eos", []), weights=not stream)
        if stream:
            from dragoman.backends.onnx.prepare.streaming import install

            install(Path(spec["gguf"]), config)
    run_builder(hf_dir, Path(spec["out"]), Path(spec["cache"]), spec["precision"], spec["provider"], spec.get("extra", {}))
    if spec.get("template"):
        (Path(spec["out"]) / "chat_template.jinja").write_text(spec["template"], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
