"""The conversations ``onnx_speed.py`` sends: deterministic text, sized in the model's tokens.

A 6-turn chat whose user turns are pasted notes (each asking for a short summary) and a
long agent-style system prompt (a tool catalogue), both built from fixed word lists so
every run and every variant sends the same bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

Messages = list[dict[str, str]]

SUBJECTS = ["The river", "Our garden", "The old library", "A night train", "The harbour", "The village school",
            "A mountain path", "The market square", "Grandmother's kitchen", "The lighthouse"]  # fmt: skip
VERBS = ["changes", "remembers", "hides", "welcomes", "outlasts", "reflects", "gathers", "forgets"]
OBJECTS = ["every season", "the sound of rain", "old letters", "travellers at dusk", "the first snow",
           "children's laughter", "the smell of bread", "a hundred small stories"]  # fmt: skip
TAILS = ["and nobody seems to mind.", "which is why people keep coming back.", "as if it had always been so.",
         "though few notice it at first.", "and the neighbours talk about it for weeks."]  # fmt: skip

TOOL_VERBS = ["fetch", "update", "archive", "summarise", "validate", "translate", "schedule", "compare"]
TOOL_NOUNS = ["invoice", "calendar entry", "customer record", "shipping label", "sensor reading", "contract",
              "support ticket", "inventory item", "meeting note", "expense report"]  # fmt: skip
TOOL_PLACES = ["the billing system", "the warehouse database", "the shared drive", "the CRM", "the ticket queue"]


def sentences(seed: int) -> list[str]:
    """An endless-enough, deterministic list of plain sentences (``seed`` picks the start)."""
    rows = itertools.product(SUBJECTS, VERBS, OBJECTS, TAILS)
    every = [f"{s} {v} {o}, {t}" for s, v, o, t in rows]
    step = 7919  # a prime: consecutive seeds land far apart
    return [every[(seed * 131 + i * step) % len(every)] for i in range(len(every))]


def text_of(count: Callable[[str], int], tokens: int, seed: int) -> str:
    """Sentences until the text is at least ``tokens`` tokens long by ``count``."""
    out: list[str] = []
    for sentence in sentences(seed):
        out.append(sentence)
        if count(" ".join(out)) >= tokens:
            break
    return " ".join(out)


def user_turn(count: Callable[[str], int], turn: int, tokens: int, conversation: int = 0) -> str:
    notes = text_of(count, tokens, seed=conversation * 10 + turn)
    return f"Here is part {turn} of my notes:\n{notes}\nSummarise the main point of this part in two sentences."


def chat_system() -> str:
    return "You are a careful assistant who keeps summaries short and concrete."


def tool_catalogue(count: Callable[[str], int], tokens: int) -> str:
    """An agent-style system prompt: a long list of tools, at least ``tokens`` tokens."""
    lines = ["You are an operations agent. You can use the following tools; pick the one that fits."]
    for i, (verb, noun, place) in enumerate(itertools.cycle(itertools.product(TOOL_VERBS, TOOL_NOUNS, TOOL_PLACES))):
        lines.append(f"- tool_{i}: {verb} the {noun} in {place}; arguments: id (string), note (string, optional).")
        if count("\n".join(lines)) >= tokens:
            break
    return "\n".join(lines)


def with_nonce(messages: Messages, nonce: str) -> Messages:
    """The same conversation with a different first line: nothing of it is cached."""
    first = {**messages[0], "content": f"Session {nonce}.\n{messages[0]['content']}"}
    return [first, *messages[1:]]
