"""Completions on the real model over real HTTP: Ollama's ``/api/generate`` with the
official ``ollama`` client and LangChain's ``OllamaLLM``, OpenAI's ``/v1/completions``
with the official ``openai`` client, and the raw wire framing of both."""

from __future__ import annotations

import json

import httpx
import ollama
import openai
import pytest
from langchain_ollama import OllamaLLM

from tests.support.server import RunningServer

MODEL = "smollm2:135m"
QUESTION = "What is the capital of France?"
# SmolLM2's own template for the chat [user: QUESTION], written out by hand.
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
CHATML = f"{SYSTEM}<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
GREEDY = {"temperature": 0, "num_predict": 12}


@pytest.fixture(scope="module")
def ol(real_server: RunningServer) -> ollama.Client:
    return ollama.Client(host=real_server.url)


@pytest.fixture(scope="module")
def oa(real_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


# -- /api/generate with the ollama client --------------------------------------------------


def test_generate_answers_and_its_stream_equals_the_whole(ol: ollama.Client) -> None:
    whole = ol.generate(model=MODEL, prompt=QUESTION, options=GREEDY)
    assert "Paris" in whole.response and whole.done and whole.done_reason in ("stop", "length")
    assert whole.prompt_eval_count > 5 and 0 < whole.eval_count <= 12
    assert whole.total_duration > 0 and whole.eval_duration > 0
    parts = list(ol.generate(model=MODEL, prompt=QUESTION, options=GREEDY, stream=True))
    assert "".join(p.response for p in parts) == whole.response
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done
    assert parts[-1].eval_count == whole.eval_count


def test_a_templated_prompt_is_the_chat_it_means(ol: ollama.Client) -> None:
    generated = ol.generate(model=MODEL, prompt=QUESTION, system="Answer in one word.", options=GREEDY)
    chatted = ol.chat(model=MODEL, messages=[{"role": "system", "content": "Answer in one word."},
                                             {"role": "user", "content": QUESTION}], options=GREEDY)  # fmt: skip
    assert generated.response == chatted.message.content
    assert generated.prompt_eval_count == chatted.prompt_eval_count


def test_a_raw_prompt_keeps_its_special_tokens_special(ol: ollama.Client) -> None:
    """The hand-written template gives the chat's answer token for token: its
    <|im_start|> are control tokens, not text (docs/api-mapping.md §7)."""
    raw = ol.generate(model=MODEL, prompt=CHATML, raw=True, options=GREEDY)
    chatted = ol.chat(model=MODEL, messages=[{"role": "user", "content": QUESTION}], options=GREEDY)
    assert raw.response == chatted.message.content
    assert raw.prompt_eval_count == chatted.prompt_eval_count


def test_context_is_given_back_and_taken_back_as_ollama_does(ol: ollama.Client) -> None:
    """The official client reads the final line's ``context`` (the ids of the prompt and
    the reply) and sends it back: the second turn reads the first before its own
    prompt, token for token the raw prompt of both turns written out (issue 27)."""
    first = ol.generate(model=MODEL, prompt=QUESTION, options=GREEDY)
    assert first.context and len(first.context) == first.prompt_eval_count + first.eval_count - (first.done_reason == "stop")
    follow_up = "And of Italy?"
    second = ol.generate(model=MODEL, prompt=follow_up, context=first.context, options=GREEDY)
    written_out = CHATML + first.response + f"{SYSTEM}<|im_start|>user\n{follow_up}<|im_end|>\n<|im_start|>assistant\n"
    raw = ol.generate(model=MODEL, prompt=written_out, raw=True, options=GREEDY)
    assert (second.response, second.prompt_eval_count) == (raw.response, raw.prompt_eval_count)
    assert second.prompt_eval_count > len(first.context) and second.context[: len(first.context)] == first.context
    alone = ol.generate(model=MODEL, prompt=follow_up, options=GREEDY)
    assert alone.prompt_eval_count == second.prompt_eval_count - len(first.context)
    streamed = list(ol.generate(model=MODEL, prompt=follow_up, context=first.context, options=GREEDY, stream=True))
    assert streamed[-1].context == second.context and all(p.context is None for p in streamed[:-1])
    assert raw.context is None  # raw mode has no token memory, as in Ollama


def test_context_is_checked_before_any_work(ol: ollama.Client) -> None:
    for context, words in (([10**9], "context[0]"), ([1] * 5000, "context holds 5000 token ids")):
        with pytest.raises(ollama.ResponseError) as info:
            ol.generate(model=MODEL, prompt="Hi", context=context)
        assert info.value.status_code == 400 and words in info.value.error


def test_an_empty_prompt_loads_and_keep_alive_0_unloads(ol: ollama.Client) -> None:
    loaded = ol.generate(model=MODEL, prompt="")
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""
    assert MODEL in [m.model for m in ol.ps().models]
    unloaded = ol.generate(model=MODEL, prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert MODEL not in [m.model for m in ol.ps().models]


def test_generate_refusals_name_the_field(ol: ollama.Client) -> None:
    cases = [
        ({"suffix": "    return x"}, "does not support insert"),
        ({"template": "{{ .Prompt }}"}, "template"),
        ({"raw": True, "system": "x"}, "system"),
        ({"think": True}, "does not support thinking"),
    ]
    for fields, words in cases:
        with pytest.raises(ollama.ResponseError) as info:
            ol.generate(model=MODEL, prompt="def f(", **fields)  # type: ignore[arg-type]
        assert info.value.status_code == 400 and words in info.value.error, fields


def test_generate_with_logprobs(real_server: RunningServer) -> None:
    body = {"model": MODEL, "prompt": QUESTION, "stream": False, "logprobs": True, "top_logprobs": 2, "options": GREEDY}
    reply = httpx.post(real_server.url + "/api/generate", json=body, timeout=60).json()
    assert len(reply["logprobs"]) == reply["eval_count"] - (reply["done_reason"] == "stop")  # EOS has none
    assert "".join(t["token"] for t in reply["logprobs"]) == reply["response"]
    assert all(len(t["top_logprobs"]) == 2 for t in reply["logprobs"])


def test_langchain_ollama_llm(real_server: RunningServer) -> None:
    llm = OllamaLLM(model=MODEL, base_url=real_server.url, temperature=0, num_predict=12)
    answer = llm.invoke(QUESTION)
    assert "Paris" in answer
    assert "".join(llm.stream(QUESTION)) == answer


# -- /v1/completions with the openai client ---------------------------------------------------


def test_completions_answer_and_the_stream_equals_the_whole(oa: openai.OpenAI) -> None:
    whole = oa.completions.create(model=MODEL, prompt=CHATML, max_tokens=12, temperature=0)
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    [choice] = whole.choices
    assert "Paris" in choice.text and choice.index == 0 and choice.finish_reason in ("stop", "length")
    assert whole.usage.prompt_tokens > 5 and 0 < whole.usage.completion_tokens <= 12
    chunks = list(oa.completions.create(model=MODEL, prompt=CHATML, max_tokens=12, temperature=0, stream=True,
                                        stream_options={"include_usage": True}))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_default_to_16_tokens(oa: openai.OpenAI) -> None:
    reply = oa.completions.create(model=MODEL, prompt="Once upon a time", temperature=0)
    assert reply.usage.completion_tokens <= 16


def test_completion_logprobs_in_the_legacy_shape(oa: openai.OpenAI) -> None:
    reply = oa.completions.create(model=MODEL, prompt=CHATML, max_tokens=6, temperature=0, logprobs=3)
    logprobs = reply.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == len(logprobs.text_offset)
    assert "".join(logprobs.tokens) == reply.choices[0].text
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(len(logprobs.tokens))]
    assert all(len(top) <= 3 and max(top.values()) >= lp - 1e-6 for top, lp in zip(logprobs.top_logprobs, logprobs.token_logprobs))
    streamed = list(oa.completions.create(model=MODEL, prompt=CHATML, max_tokens=6, temperature=0, logprobs=3, stream=True))
    text_chunks = [c.choices[0] for c in streamed if c.choices and c.choices[0].text]
    assert all("".join(c.logprobs.tokens) == c.text for c in text_chunks)  # logprobs on the chunk of their text
    assert [t for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens] == logprobs.tokens


def test_a_list_of_prompts_is_one_choice_each(oa: openai.OpenAI) -> None:
    prompts = [CHATML, f"{SYSTEM}<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n"]
    reply = oa.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0, echo=True)
    assert [c.index for c in reply.choices] == [0, 1]
    assert all(c.text.startswith(p) for c, p in zip(reply.choices, prompts))
    one = oa.completions.create(model=MODEL, prompt=prompts[1], max_tokens=6, temperature=0)
    assert reply.choices[1].text == prompts[1] + one.choices[0].text
    streamed = list(oa.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0, stream=True))
    by_index = {0: "", 1: ""}
    for chunk in streamed:
        for choice in chunk.choices:
            by_index[choice.index] += choice.text
    assert by_index[1] == one.choices[0].text


def test_completion_refusals_name_the_parameter(oa: openai.OpenAI, real_server: RunningServer) -> None:
    for fields, param in [({"best_of": 2}, "best_of"), ({"n": 2}, "n"), ({"suffix": "}"}, "suffix")]:
        with pytest.raises(openai.BadRequestError) as info:
            oa.completions.create(model=MODEL, prompt="def f(", max_tokens=2, **fields)  # type: ignore[arg-type]
        assert info.value.body["param"] == param, fields  # type: ignore[index]
    too_many = {"model": MODEL, "prompt": ["x"] * 17, "max_tokens": 1}
    reply = httpx.post(real_server.url + "/v1/completions", json=too_many, timeout=30)
    assert reply.status_code == 400 and "the limit is 16" in reply.json()["error"]["message"]


# -- the raw wire ----------------------------------------------------------------------------


def test_generate_ndjson_framing(real_server: RunningServer) -> None:
    body = {"model": MODEL, "prompt": QUESTION, "options": {"num_predict": 4}}
    with httpx.stream("POST", real_server.url + "/api/generate", json=body, timeout=60) as reply:
        assert reply.headers["content-type"] == "application/x-ndjson"
        raw = b"".join(reply.iter_raw())
    assert raw.endswith(b"\n") and b"\n\n" not in raw
    lines = [json.loads(line) for line in raw.splitlines()]
    assert all(set(line) >= {"model", "created_at", "response", "done"} for line in lines)
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 4
    assert not any("message" in line for line in lines)


def test_completions_sse_framing(real_server: RunningServer) -> None:
    body = {"model": MODEL, "prompt": CHATML, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", real_server.url + "/v1/completions", json=body, timeout=60) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(reply.iter_raw())
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-2]]
    assert all(e.startswith(b"data: {") for e in events[:-2])
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 2) + ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
