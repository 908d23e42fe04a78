"""Chat presets and the special-token split, table-driven."""

from __future__ import annotations

import pytest

from dragoman.adapters.canonical import Message, TextPart
from dragoman.adapters.errors import RequestError
from dragoman.backends.ctransformers.prompt import Preset, choose_preset, render_preset, split_special


def m(role: str, text: str) -> Message:
    return Message(role=role, parts=[TextPart(text)])  # type: ignore[arg-type]


CHAT = [m("system", "Be brief."), m("user", "Hi"), m("assistant", "Hello!"), m("user", "Capital of France?")]

RENDER_CASES: list[tuple[str, Preset, list[Message], str]] = [
    (
        "chatml",
        "chatml",
        CHAT,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
    ("chatml without system", "chatml", [m("user", "Hi")], "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    (
        "llama2 folds the system prompt into the first turn",
        "llama2",
        CHAT,
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Capital of France? [/INST]",
    ),
    ("llama2 without system", "llama2", [m("user", "Hi")], "<s>[INST] Hi [/INST]"),
    ("llama2 system alone", "llama2", [m("system", "Rules.")], "<s>[INST] <<SYS>>\nRules.\n<</SYS>> [/INST]"),
    (
        "alpaca",
        "alpaca",
        CHAT,
        "Be brief.\n\n### Instruction:\nHi\n\n### Response:\nHello!\n\n"
        "### Instruction:\nCapital of France?\n\n### Response:\n",
    ),
    (
        "alpaca default preamble",
        "alpaca",
        [m("user", "Hi")],
        "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\nHi\n\n### Response:\n",
    ),
    (
        "plain transcript",
        "plain",
        [*CHAT, m("tool", "42")],
        "System: Be brief.\nUser: Hi\nAssistant: Hello!\nUser: Capital of France?\nTool: 42\nAssistant:",
    ),
    ("chatml writes any role", "chatml", [m("narrator", "Once.")], "<|im_start|>narrator\nOnce.<|im_end|>\n<|im_start|>assistant\n"),
    ("plain writes any role", "plain", [m("narrator", "Once.")], "Narrator: Once.\nAssistant:"),
]


@pytest.mark.parametrize(("name", "preset", "messages", "expected"), RENDER_CASES, ids=[c[0] for c in RENDER_CASES])
def test_render_preset(name: str, preset: Preset, messages: list[Message], expected: str) -> None:
    assert render_preset(preset, messages) == expected


CHATML_IDS = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
SPLIT_CASES: list[tuple[str, str, dict[str, int], list[str | int]]] = [
    ("no specials known", "<|im_start|>user", {}, ["<|im_start|>user"]),
    ("empty prompt", "", CHATML_IDS, []),
    ("chatml turn", "<|im_start|>user\nHi<|im_end|>\n", CHATML_IDS, [1, "user\nHi", 2, "\n"]),
    ("adjacent specials", "<|im_end|><|im_start|>", CHATML_IDS, [2, 1]),
    ("text only", "plain words", CHATML_IDS, ["plain words"]),
    ("longest token wins", "<s><sys>x", {"<s>": 1, "<sys>": 7, "<s><sys>": 9}, [9, "x"]),
    ("regex characters are literal", "a[b]*c", {"[b]*": 5}, ["a", 5, "c"]),
]


@pytest.mark.parametrize(("name", "prompt", "specials", "expected"), SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
def test_split_special(name: str, prompt: str, specials: dict[str, int], expected: list[str | int]) -> None:
    assert split_special(prompt, specials) == expected


PRESET_CASES = [
    ("auto picks chatml from the vocabulary", "auto", CHATML_IDS, "chatml"),
    ("auto falls back to a transcript", "auto", {"<|endoftext|>": 0}, "plain"),
    ("an explicit choice wins", "llama2", CHATML_IDS, "llama2"),
]


@pytest.mark.parametrize(("name", "choice", "specials", "expected"), PRESET_CASES, ids=[c[0] for c in PRESET_CASES])
def test_choose_preset(name: str, choice: str, specials: dict[str, int], expected: str) -> None:
    assert choose_preset(choice, specials) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("preset", ["llama2", "alpaca"])
def test_formats_without_the_role_refuse_it_by_name(preset: Preset) -> None:
    with pytest.raises(RequestError) as info:
        render_preset(preset, [m("user", "Hi"), m("narrator", "Once.")])
    assert info.value.param == "messages[1].role"
    assert "'narrator'" in info.value.message
