"""Chat messages → the prompt text, and prompt text → pieces to tokenize.

ctransformers knows no chat templates, so the backend brings them: a GGUF's own
``tokenizer.chat_template`` (rendered as transformers does), or one of the presets
below for files that carry none (every GGML-era file). The library's tokenizer also
does not know special tokens: ``<|im_start|>`` in text becomes six ordinary tokens.
:func:`split_special` cuts them out so the backend can put their ids in instead.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from dragoman.adapters.canonical import Message, TextPart
from dragoman.adapters.errors import RequestError
from dragoman.backends.text.segments import Guard, Segment

Preset = Literal["chatml", "llama2", "alpaca", "plain"]
TemplateChoice = Literal["auto", "chatml", "llama2", "alpaca", "plain"]

# Text that ends a reply under each preset, for models that write it as text.
PRESET_STOPS: dict[Preset, tuple[str, ...]] = {
    "chatml": ("<|im_end|>", "<|im_start|>"),
    "llama2": ("</s>", "[INST]"),
    "alpaca": ("### Instruction:", "### Input:"),
    "plain": ("\nUser:", "\nSystem:"),
}


def choose_preset(template: TemplateChoice, special_tokens: dict[str, int]) -> Preset:
    """The preset for ``auto`` when a file has no template of its own: ChatML when
    its vocabulary has ChatML's markers, else a plain transcript."""
    if template != "auto":
        return template
    return "chatml" if "<|im_start|>" in special_tokens else "plain"


def render_preset(preset: Preset, messages: list[Message]) -> str:
    """The prompt for ``messages`` in ``preset``, ending where the assistant writes.
    ChatML and the plain transcript write any role; Llama 2 and Alpaca have only
    system, user and assistant turns (and tool results as user turns), so another
    role is refused by name rather than passed off as the user's."""
    if preset in ("llama2", "alpaca"):
        for i, message in enumerate(messages):
            if message.role not in ("system", "user", "assistant", "tool"):
                param = f"messages[{i}].role"
                raise RequestError(f"{param}: the {preset} prompt format has no role '{message.role}'", param=param)
    return _RENDERERS[preset](messages)


def render_preset_segments(preset: Preset, messages: list[Message], protected: frozenset[str]) -> list[Segment]:
    """:func:`render_preset` as segments: ``protected`` texts in messages stay plain."""
    guard = Guard(protected)
    guarded = [msgspec.structs.replace(m, role=guard.text(m.role), parts=[TextPart(guard.text(m.text))]) for m in messages]
    return guard.segments(render_preset(preset, guarded))


def pieces_of(segments: list[Segment], special_tokens: dict[str, int]) -> list[str | int]:
    """What :func:`backends.ctransformers.generation.tokenize` takes: special tokens
    cut out of the special segments as ids; plain segments as text, which the
    library's tokenizer never reads as control tokens."""
    pieces: list[str | int] = []
    for segment in segments:
        pieces.extend(split_special(segment.text, special_tokens) if segment.special else [segment.text])
    return pieces


def _chatml(messages: list[Message]) -> str:
    turns = [f"<|im_start|>{m.role}\n{m.text}<|im_end|>\n" for m in messages]
    return "".join(turns) + "<|im_start|>assistant\n"


def _llama2(messages: list[Message]) -> str:
    """Meta's Llama 2 chat format: the system prompt folds into the first [INST]."""
    system = "\n".join(m.text for m in messages if m.role == "system")
    out, pending = [], f"<<SYS>>\n{system}\n<</SYS>>\n\n" if system else ""
    for message in (m for m in messages if m.role != "system"):
        if message.role == "assistant":
            out.append(f" {message.text.strip()} </s>")
        else:
            out.append(f"<s>[INST] {pending}{message.text.strip()} [/INST]")
            pending = ""
    if not out:  # a system prompt alone
        out.append(f"<s>[INST] {pending.rstrip()} [/INST]")
    return "".join(out)


def _alpaca(messages: list[Message]) -> str:
    system = "\n".join(m.text for m in messages if m.role == "system")
    head = (
        system
        or "Below is an instruction that describes a task. Write a response that appropriately completes the request."
    ) + "\n\n"
    blocks = []
    for message in (m for m in messages if m.role != "system"):
        label = "### Response:" if message.role == "assistant" else "### Instruction:"
        blocks.append(f"{label}\n{message.text}\n\n")
    return head + "".join(blocks) + "### Response:\n"


def _plain(messages: list[Message]) -> str:
    """A transcript any base model continues: ``User: …`` / ``Assistant: …`` lines."""
    lines = [f"{m.role.capitalize()}: {m.text}" for m in messages]
    return "\n".join([*lines, "Assistant:"])


_RENDERERS = {"chatml": _chatml, "llama2": _llama2, "alpaca": _alpaca, "plain": _plain}


def split_special(prompt: str, special_tokens: dict[str, int]) -> list[str | int]:
    """``prompt`` as text pieces and the ids of the special tokens between them:
    ``"<|im_start|>user\\nHi"`` → ``[1, "user\\nHi"]``. Longest token first, so a
    token that is a prefix of another never splits it."""
    if not special_tokens:
        return [prompt] if prompt else []
    pattern = re.compile("|".join(re.escape(t) for t in sorted(special_tokens, key=len, reverse=True)))
    pieces: list[str | int] = []
    position = 0
    for match in pattern.finditer(prompt):
        if match.start() > position:
            pieces.append(prompt[position : match.start()])
        pieces.append(special_tokens[match.group()])
        position = match.end()
    if position < len(prompt):
        pieces.append(prompt[position:])
    return pieces
