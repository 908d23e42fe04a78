"""OpenAI's ``n`` and ``logit_bias`` on the real model over real HTTP, with the official
``openai`` client (issue 27): ``n`` choices indexed 0…n-1, streamed and not, started
together on the batch engine; a bias of -100 on the token the model would pick
changes the pick."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
import tokenizers

from tests.support.server import RunningServer

MODEL = "smollm2:135m"
POEM = [{"role": "user", "content": "Write a one-line poem about the sea."}]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def oa(real_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


def streamed_choices(stream: openai.Stream) -> tuple[dict[int, str], dict[int, str], list]:  # type: ignore[type-arg]
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    chunks = list(stream)
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    return texts, finishes, chunks


def test_n_sampled_choices_are_independent(oa: openai.OpenAI) -> None:
    sampled = {"temperature": 1.0, "seed": 7, "max_tokens": 12}
    whole = oa.chat.completions.create(model=MODEL, messages=POEM, n=3, **sampled)  # type: ignore[arg-type]
    assert [c.index for c in whole.choices] == [0, 1, 2]
    texts = [c.message.content for c in whole.choices]
    assert all(texts) and len(set(texts)) > 1  # seeds 7, 8, 9
    one = oa.chat.completions.create(model=MODEL, messages=POEM, **sampled)  # type: ignore[arg-type]
    assert whole.usage is not None and one.usage is not None
    assert whole.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt, counted once
    assert 3 <= whole.usage.completion_tokens <= 3 * 12
    texts_streamed, finishes, chunks = streamed_choices(
        oa.chat.completions.create(model=MODEL, messages=POEM, n=3, stream=True, stream_options={"include_usage": True}, **sampled)  # type: ignore[arg-type]
    )
    assert sorted(texts_streamed) == [0, 1, 2] and all(texts_streamed.values()) and len(set(texts_streamed.values())) > 1
    assert sorted(finishes) == [0, 1, 2]
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == one.usage.prompt_tokens


def test_n_greedy_choices_are_the_plain_reply_whole_and_streamed(oa: openai.OpenAI) -> None:
    greedy = {"temperature": 0, "max_tokens": 8}
    plain = oa.chat.completions.create(model=MODEL, messages=QUESTION, **greedy)  # type: ignore[arg-type]
    expected = plain.choices[0].message.content
    whole = oa.chat.completions.create(model=MODEL, messages=QUESTION, n=3, **greedy)  # type: ignore[arg-type]
    assert [(c.index, c.message.content) for c in whole.choices] == [(i, expected) for i in range(3)]
    assert whole.usage is not None and plain.usage is not None
    assert whole.usage.completion_tokens == 3 * plain.usage.completion_tokens
    texts, finishes, _ = streamed_choices(oa.chat.completions.create(model=MODEL, messages=QUESTION, n=3, stream=True, **greedy))  # type: ignore[arg-type]
    assert texts == {i: expected for i in range(3)}
    assert finishes == {i: plain.choices[0].finish_reason for i in range(3)}


def test_one_choice_is_the_plain_reply(oa: openai.OpenAI) -> None:
    one = oa.chat.completions.create(model=MODEL, messages=QUESTION, n=1, temperature=0, max_tokens=8)
    plain = oa.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=8)
    assert [c.message.content for c in one.choices] == [plain.choices[0].message.content]


def test_n_over_the_limit_is_a_400_naming_n(oa: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oa.chat.completions.create(model=MODEL, messages=QUESTION, n=9)
    assert info.value.body["param"] == "n" and "max_choices" in info.value.body["message"]  # type: ignore[index]


def test_a_negative_bias_changes_the_pick(oa: openai.OpenAI, model_dir: Path) -> None:
    greedy = {"temperature": 0, "max_tokens": 6}
    plain = oa.chat.completions.create(model=MODEL, messages=QUESTION, logprobs=True, **greedy)  # type: ignore[arg-type]
    first = plain.choices[0].logprobs.content[0].token  # type: ignore[index, union-attr]
    vocabulary = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    [token_id] = vocabulary.encode(first, add_special_tokens=False).ids
    biased = oa.chat.completions.create(model=MODEL, messages=QUESTION, logprobs=True, logit_bias={str(token_id): -100}, **greedy)  # type: ignore[arg-type]
    assert biased.choices[0].logprobs.content[0].token != first  # type: ignore[index, union-attr]
    # and +100 on another token makes it the pick
    other = vocabulary.encode(" Paris", add_special_tokens=False).ids[0]
    pushed = oa.chat.completions.create(model=MODEL, messages=QUESTION, logit_bias={str(other): 100}, **greedy)  # type: ignore[arg-type]
    assert (pushed.choices[0].message.content or "").startswith(" Paris") or (pushed.choices[0].message.content or "").startswith("Paris")


def test_a_bias_on_no_token_of_the_model_is_a_400(oa: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oa.chat.completions.create(model=MODEL, messages=QUESTION, logit_bias={"999999": -100}, max_tokens=2)
    assert info.value.body["param"] == "logit_bias" and "not a token id" in info.value.body["message"]  # type: ignore[index]


def test_return_progress_streams_prompt_progress_chunks(oa: openai.OpenAI) -> None:
    """llama-server's return_progress: chunks with no choices and ``prompt_progress``
    while the prompt is read (the batch engine reads a long one in chunks), then the reply."""
    long = [{"role": "user", "content": "Summarise this: " + "The sea is calm and blue today. " * 60}]
    chunks = list(oa.chat.completions.create(model=MODEL, messages=long, max_tokens=4, temperature=0, stream=True,  # type: ignore[arg-type]
                                             extra_body={"return_progress": True}))  # fmt: skip
    progress = [c.model_extra["prompt_progress"] for c in chunks if c.model_extra and "prompt_progress" in c.model_extra]
    assert len(progress) >= 2, progress  # more than one chunk of the prompt
    assert all(not c.choices for c in chunks if c.model_extra and "prompt_progress" in c.model_extra)
    assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
    last = progress[-1]
    assert last["processed"] == last["total"] > 400 and last["time_ms"] >= 0 and 0 <= last["cache"] < last["total"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plain = list(oa.chat.completions.create(model=MODEL, messages=long, max_tokens=4, temperature=0, stream=True))  # type: ignore[arg-type]
    assert not [c for c in plain if c.model_extra and "prompt_progress" in c.model_extra]
