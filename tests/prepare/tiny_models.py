"""Tiny random-weight models, one per architecture, built offline: a Hugging Face
folder from a transformers config, and the same weights written as GGUF with the
``gguf`` package's writer and name mapping, undoing what transformers' GGUF reader
undoes (llama.cpp's q/k permutation for llama, the +1 on Gemma/Nemotron norms, the
squeezed LFM2 convolution) — so a wrong writer or a wrong reader fails the logits test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
    "<|user|>", "<|assistant|>", "<|system|>", "<|end|>",
    "<s>", "</s>", "[INST]", "[/INST]",
]  # fmt: skip
CORPUS = [
    "The capital of France is Paris.", "Hello, how are you today?", "What is the weather like in Lyon?",
    "system user assistant tool", "Once upon a time there was a tiny model that answered questions.",
    "You are a helpful assistant.", "Say hello in three languages.",
]  # fmt: skip
VOCAB_SIZE = 384
SENTENCEPIECE = ("gemma2", "gemma3")  # tokenizer.ggml.model "llama", as real Gemma files
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, vocab_size=VOCAB_SIZE, initializer_range=0.2)  # fmt: skip

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
GEMMA = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
PHI3 = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)


@dataclass(frozen=True)
class Arch:
    """One architecture: how to make its config, and how it is spelled in GGUF."""

    name: str  # the GGUF general.architecture (and the test id)
    config: Callable[[], Any]
    template: str
    bos: str
    eos: str  # the end-of-turn token: generation stops on it
    gguf_arch: str | None = None  # None: transformers cannot read this architecture from GGUF
    gguf_name: str = "tiny"


def _config(cls_name: str, **overrides: Any) -> Callable[[], Any]:
    def make() -> Any:
        import transformers

        return getattr(transformers, cls_name)(**{**SMALL, **overrides})

    return make


def architectures(tokens: dict[str, int]) -> list[Arch]:
    ids = lambda bos, eos: {"bos_token_id": tokens[bos], "eos_token_id": tokens[eos], "pad_token_id": tokens["<|endoftext|>"]}  # noqa: E731
    return [
        Arch("llama", _config("LlamaConfig", tie_word_embeddings=True, **ids("<|begin_of_text|>", "<|eot_id|>")),
             LLAMA3, "<|begin_of_text|>", "<|eot_id|>", gguf_arch="llama"),
        Arch("mistral", _config("MistralConfig", tie_word_embeddings=False, sliding_window=None, **ids("<s>", "</s>")),
             MISTRAL, "<s>", "</s>", gguf_arch="llama", gguf_name="tiny mistral"),
        Arch("qwen2", _config("Qwen2Config", tie_word_embeddings=True, **ids("<|endoftext|>", "<|im_end|>")),
             CHATML, "<|endoftext|>", "<|im_end|>", gguf_arch="qwen2"),
        # head_dim differs from hidden/heads, as in Qwen3-0.6B: only the GGUF's key_length says so
        Arch("qwen3", _config("Qwen3Config", head_dim=32, tie_word_embeddings=True, **ids("<|endoftext|>", "<|im_end|>")),
             CHATML, "<|endoftext|>", "<|im_end|>", gguf_arch="qwen3"),
        # LongRoPE with a partial rotary width, as Phi-4-mini (head 32, rotary 16, 256 → 512 positions)
        Arch("phi3", _config("Phi3Config", tie_word_embeddings=False, num_attention_heads=2, num_key_value_heads=1,
                             max_position_embeddings=512, original_max_position_embeddings=256, partial_rotary_factor=0.5,
                             rope_scaling={"rope_type": "longrope", "long_factor": [1.0 + i / 4 for i in range(8)],
                                           "short_factor": [1.0 + i / 16 for i in range(8)]},
                             **ids("<s>", "<|end|>")), PHI3, "<s>", "<|end|>", gguf_arch="phi3"),
        Arch("nemotron", _config("NemotronConfig", tie_word_embeddings=False, num_attention_heads=2, num_key_value_heads=1,
                                 **ids("<s>", "</s>")),
             MISTRAL, "<s>", "</s>", gguf_arch="nemotron"),
        Arch("lfm2", _config("Lfm2Config", tie_word_embeddings=True, layer_types=["conv", "full_attention"],
                             **ids("<|endoftext|>", "<|im_end|>")), CHATML, "<|endoftext|>", "<|im_end|>", gguf_arch="lfm2"),
        Arch("gemma2", _config("Gemma2Config", head_dim=16, query_pre_attn_scalar=16, sliding_window=16,
                               **ids("<bos>", "<end_of_turn>")), GEMMA, "<bos>", "<end_of_turn>", gguf_arch="gemma2"),
        Arch("gemma3", _config("Gemma3TextConfig", head_dim=16, query_pre_attn_scalar=16, sliding_window=128,
                               **ids("<bos>", "<end_of_turn>")), GEMMA, "<bos>", "<end_of_turn>", gguf_arch="gemma3"),
        Arch("granite", _config("GraniteConfig", tie_word_embeddings=True, **ids("<|endoftext|>", "<|im_end|>")),
             CHATML, "<|endoftext|>", "<|im_end|>"),
    ]  # fmt: skip


# -- the tokenizer -----------------------------------------------------------------------


def train_tokenizer() -> Any:
    """A byte-level BPE of VOCAB_SIZE tokens whose specials cover every template above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tokenizer.train_from_iterator(CORPUS * 20, trainer)
    return tokenizer


def train_gemma_tokenizer() -> Any:
    """Gemma's kind of vocabulary (what its GGUFs carry as tokenizer.ggml.model "llama"):
    BPE over text whose spaces are "▁", with <0xNN> byte-fallback tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizer

    trainee = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    trainee.normalizer = normalizers.Replace(" ", "\u2581")
    # sentencepiece's pieces start with the space: "▁Paris"
    trainee.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", *[t for t in SPECIALS if t not in ("<bos>", "<eos>")]]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - 256, special_tokens=specials, show_progress=False)
    trainee.train_from_iterator(CORPUS * 20, trainer)
    vocab = dict(trainee.get_vocab())
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in json.loads(trainee.to_str())["model"]["merges"]]
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, bos_token="<bos>", eos_token="<end_of_turn>", pad_token="<pad>")
    tokenizer.add_special_tokens({"additional_special_tokens": specials}, replace_extra_special_tokens=False)
    return tokenizer


# -- writing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyModel:
    arch: Arch
    hf_dir: Path
    gguf: Path | None
    model: Any  # the PyTorch model, for reference logits
    tokenizer: Any  # transformers' tokenizer of hf_dir


def make_tiny(arch_name: str, folder: Path, seed: int = 0, quantize: str | None = None) -> TinyModel:
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    if arch_name in SENTENCEPIECE:
        tokenizer = train_gemma_tokenizer()
        raw = tokenizer.backend_tokenizer
        arch = next(a for a in architectures(tokenizer.get_vocab()) if a.name == arch_name)
        tokenizer.chat_template = arch.template
    else:
        raw = train_tokenizer()
        arch = next(a for a in architectures(raw.get_vocab()) if a.name == arch_name)
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=raw, bos_token=arch.bos, eos_token=arch.eos, pad_token="<|endoftext|>",
            chat_template=arch.template,
        )  # fmt: skip
    config = arch.config()
    config.vocab_size = len(tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    _spread_norms(model, seed)
    hf_dir = folder / "hf"
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    gguf = write_gguf(arch, model, raw, folder / f"{arch.name}.gguf", quantize) if arch.gguf_arch else None
    return TinyModel(arch, hf_dir, gguf, model, tokenizer)


def _spread_norms(model: Any, seed: int) -> None:
    """Random norm weights: a norm left at 1 (or 0) hides a missing +1/-1 offset."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if "norm" in name and tensor.ndim == 1:
                tensor.copy_(torch.rand(tensor.shape, generator=generator) * 0.5 + 0.75 - (1.0 if _zero_centred(model) else 0.0))


def _zero_centred(model: Any) -> bool:
    return model.config.model_type in ("gemma2", "gemma3_text", "nemotron")


def write_gguf(arch: Arch, model: Any, raw_tokenizer: Any, path: Path, quantize: str | None = None) -> Path:
    """``quantize`` ("Q8_0", "Q4_0"…) stores the 2-D weights in that ggml type, as a
    quantized GGUF does (the norms stay F32, as llama.cpp keeps them)."""
    import gguf
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    config = model.config
    name = arch.gguf_arch
    writer = gguf.GGUFWriter(str(path), name)
    writer.add_name(arch.gguf_name)
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{quantize}"] if quantize else gguf.LlamaFileType.ALL_F32)
    for gguf_key, hf_key in GGUF_CONFIG_MAPPING[name].items():
        value = _hf_value(config, hf_key) if isinstance(hf_key, str) else None
        if value is None or hf_key == "vocab_size" or (name == "lfm2" and gguf_key in ("attention.head_count_kv", "feed_forward_length")):
            continue
        key = f"{name}.{gguf_key}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, int):
            writer.add_uint32(key, value)
        else:
            writer.add_float32(key, value)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if "attention.key_length" not in GGUF_CONFIG_MAPPING[name]:
        writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    if name in ("gemma2",):
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
        writer.add_final_logit_softcapping(config.final_logit_softcapping)
    if name == "phi3":
        rotary = int(head_dim * config.partial_rotary_factor)
        writer.add_rope_dimension_count(rotary)
        rope = config.rope_parameters
        if rope.get("rope_type") == "longrope":
            writer.add_rope_scaling_orig_ctx_len(config.original_max_position_embeddings)
            writer.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
            writer.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))
    if name == "lfm2":
        writer.add_key_value("lfm2.attention.head_count_kv",
                             [config.num_key_value_heads if t == "full_attention" else 0 for t in config.layer_types],
                             gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT32)  # fmt: skip
        writer.add_layer_norm_rms_eps(config.norm_eps)
        # llama.cpp writes the width after LFM2's block_auto_adjust_ff_dim, the real one
        writer.add_feed_forward_length(model.state_dict()["model.layers.0.feed_forward.w1.weight"].shape[0])
    _write_tokenizer(writer, raw_tokenizer, config, arch.template)
    names = gguf.get_tensor_name_map(_arch_enum(name), config.num_hidden_layers)
    tied = getattr(config, "tie_word_embeddings", False)
    for hf_name, tensor in model.state_dict().items():
        if tied and hf_name == "lm_head.weight":
            continue
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = names.get_name(base)
        if gguf_name is None:
            raise ValueError(f"no GGUF name for {hf_name} in {name}")
        data = tensor.float().numpy()
        data = np.ascontiguousarray(_as_llama_cpp_writes(name, gguf_name, suffix, data, config))
        if quantize and data.ndim == 2:
            qtype = gguf.GGMLQuantizationType[quantize]
            writer.add_tensor(f"{gguf_name}.{suffix}", gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(f"{gguf_name}.{suffix}", data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _hf_value(config: Any, key: str) -> Any:
    if key == "rope_theta" and getattr(config, "rope_theta", None) is None:  # transformers 5 nests it
        return (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    return getattr(config, key, None)


def _as_llama_cpp_writes(arch: str, gguf_name: str, suffix: str, data: np.ndarray, config: Any) -> np.ndarray:
    if arch == "llama" and gguf_name.endswith(("attn_q", "attn_k")):
        heads = config.num_attention_heads
        if gguf_name.endswith("attn_k"):
            heads = config.num_key_value_heads
        return data.reshape(heads, 2, data.shape[0] // heads // 2, *data.shape[1:]).swapaxes(1, 2).reshape(data.shape)
    if arch in ("gemma2", "gemma3", "nemotron") and gguf_name.endswith("norm") and data.ndim == 1 and suffix == "weight":
        return data + 1
    if arch == "lfm2" and gguf_name.endswith("shortconv.conv"):
        return data.squeeze(1)
    return data


def _arch_enum(name: str) -> Any:
    import gguf

    return next(key for key, value in gguf.MODEL_ARCH_NAMES.items() if value == name)


def _write_tokenizer(writer: Any, raw: Any, config: Any, template: str) -> None:
    vocab = raw.get_vocab()
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    specials = set(SPECIALS) | {"<pad>", "<unk>", "<mask>"}
    sentencepiece = any(t == "<0x00>" for t in tokens)
    writer.add_tokenizer_model("llama" if sentencepiece else "gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    if sentencepiece:
        writer.add_token_scores([-float(i) for i in range(len(tokens))])
        writer.add_unk_token_id(vocab["<unk>"])
    writer.add_token_types([3 if t in specials else 6 if re.fullmatch(r"<0x[0-9A-F]{2}>", t) else 1 for t in tokens])
    merges = json.loads(raw.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_pad_token_id(config.pad_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)
    if config.vocab_size != len(tokens):  # a model wider than its (tiny) tokenizer
        writer.add_vocab_size(config.vocab_size)
