"""What every built model must show: ONNX logits equal to PyTorch's on the same tokens,
the prompt rendered as transformers renders it, the same token ids, and the end-of-turn
token among the ids generation stops on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dragoman.adapters.canonical import Message, TextPart
from dragoman.backends.text.chat_template import load_chat_template, render_chat, special_tokens

# Max |ONNX − PyTorch| over the vocabulary for an fp32 build, at logits of magnitude ~5
# (observed: ≤ 1.3e-5 for every architecture here).
TOLERANCE = 1e-4
CONVERSATION = [
    ("system", "You are a helpful assistant."),
    ("user", "Hello, how are you today?"),
    ("assistant", "Once upon a time there was a tiny model."),
    ("user", "What is the capital of France?"),
]


def messages() -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in CONVERSATION]


def rendered_by_dragoman(model_dir: Path) -> str:
    canonical = [Message(role=role, parts=[TextPart(text)]) for role, text in CONVERSATION]  # type: ignore[arg-type]
    return render_chat(load_chat_template(model_dir), canonical, tokens=special_tokens(model_dir))


def expected_prompt(tokenizer: Any) -> str:
    return tokenizer.apply_chat_template(messages(), tokenize=False, add_generation_prompt=True)


def torch_logits(model: Any, ids: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float().numpy()


def onnx_logits(model_dir: Path, ids: list[int], steps: int = 2) -> tuple[list[np.ndarray], list[int]]:
    """Logits after the prompt and after each greedy token (the KV-cache path), and
    the tokens chosen."""
    import onnxruntime_genai as og

    model = og.Model(str(model_dir))
    params = og.GeneratorParams(model)
    context = json.loads((model_dir / "genai_config.json").read_text())["model"]["context_length"]
    params.set_search_options(max_length=context, do_sample=False)  # ≥ any sliding window here
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    logits, chosen = [], []
    for _ in range(steps):
        logits.append(np.array(generator.get_logits()).reshape(-1))
        generator.generate_next_token()
        chosen.append(int(generator.get_next_tokens()[0]))
    return logits, chosen


def assert_matches_pytorch(model_dir: Path, reference: Any, ids: list[int]) -> float:
    onnx, chosen = onnx_logits(model_dir, ids)
    worst = 0.0
    for step, logits in enumerate(onnx):
        expected = torch_logits(reference, ids + chosen[:step])
        worst = max(worst, float(np.abs(logits - expected).max()))
        assert int(np.argmax(logits)) == chosen[step]
    assert worst < TOLERANCE, f"ONNX logits differ from PyTorch's by {worst}"
    return worst


def onnx_token_ids(model_dir: Path, text: str) -> list[int]:
    import onnxruntime_genai as og

    return list(og.Tokenizer(og.Model(str(model_dir))).encode(text))


def stop_ids(model_dir: Path) -> list[int]:
    eos = json.loads((model_dir / "genai_config.json").read_text())["model"]["eos_token_id"]
    return eos if isinstance(eos, list) else [eos]
