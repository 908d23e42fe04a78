"""Ollama's token memory on a local model: the ids a client sends back are checked
before anything decodes them (dragoman/backends/text/memory.py)."""

from __future__ import annotations

import pytest

from dragoman.adapters.errors import ContextTooLong, RequestError
from dragoman.backends.text.memory import check_context

CASES = [
    ("more ids than the context holds", list(range(8)), ContextTooLong, "context holds 8 token ids"),
    ("as many as the context leaves no room", list(range(7)) + [0], ContextTooLong, "context holds 8"),
    ("an id past the vocabulary", [1, 2, 100], RequestError, "context[2]: 100 is not a token id"),
    ("a negative id", [-1], RequestError, "context[0]: -1"),
]


@pytest.mark.parametrize(("name", "ids", "error", "words"), CASES, ids=[c[0] for c in CASES])
def test_refusals_name_the_field(name: str, ids: list[int], error: type, words: str) -> None:
    with pytest.raises(error) as info:
        check_context(ids, vocab_size=100, context_length=8)
    assert info.value.param == "context" and words in info.value.message


def test_ids_of_the_model_that_fit_pass() -> None:
    check_context([0, 99, 5], vocab_size=100, context_length=8)
