"""``/api/show`` as the clients that probe it read it: Continue (``parameters`` lines,
``.Suffix`` in the template), VS Code and LlamaIndex (``model_info``), Zed and VS Code
(``capabilities``) — on the real default model and on a test model with FIM tokens."""

from __future__ import annotations

import json
import re

import httpx
import ollama
import openai

from tests.support.server import RunningServer

# Continue's own parsing of `parameters` (core/llm/llms/Ollama.ts).
CONTINUE_LINE = re.compile(r'^(\S+)\s+((?:".*")|\S+)$')


def continue_reads(shown: dict[str, object]) -> tuple[int | None, list[str], bool]:
    """(context length, stop strings, FIM on) as Continue derives them."""
    context, stops = None, []
    for line in str(shown["parameters"]).split("\n"):
        match = CONTINUE_LINE.match(line)
        assert match, line
        key, value = match.groups()
        if key == "num_ctx":
            context = int(value)
        elif key == "stop":
            stops.append(json.loads(value))
    return context, stops, ".Suffix" in str(shown["template"])


def show(server: RunningServer, name: str) -> dict[str, object]:
    reply = httpx.post(server.url + "/api/show", json={"name": name}, timeout=30)  # Continue sends "name"
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_the_default_model(real_server: RunningServer) -> None:
    shown = show(real_server, "smollm2:135m")
    # the model's end token as a stop line (Ollama's smollm2 lists it); no FIM tokens in its vocabulary
    assert continue_reads(shown) == (2048, ["<|im_end|>"], False)
    assert 'stop                           "<|im_end|>"' in str(shown["parameters"]).split("\n")
    assert shown["model_info"] == {
        "general.architecture": "llama",
        "general.basename": "smollm2:135m",
        "general.parameter_count": 135_000_000,
        "llama.context_length": 2048,
        "llama.embedding_length": 576,
    }
    assert shown["capabilities"] == ["completion", "tools"]


def test_a_model_with_fim_tokens(fim_server: RunningServer) -> None:
    shown = show(fim_server, "fim:test")
    assert continue_reads(shown) == (1024, ["<|endoftext|>", "END"], True)
    assert str(shown["parameters"]).split("\n")[-1].split() == ["temperature", "0.2"]
    assert shown["capabilities"] == ["completion", "tools", "insert"]
    assert str(shown["template"]).startswith("{{- if .Suffix }}<fim_prefix>{{ .Prompt }}<fim_suffix>{{ .Suffix }}<fim_middle>")
    assert ollama.Client(host=fim_server.url).show("fim:test").capabilities == ["completion", "tools", "insert"]


def test_fill_in_the_middle_with_both_clients(fim_server: RunningServer) -> None:
    """The weights know no FIM (they are SmolLM2's): what is checked is that the
    request is taken and answered in each client's shape (tests/onnx/test_fim.py
    checks the tokens)."""
    native = ollama.Client(host=fim_server.url)
    reply = native.generate(model="fim:test", prompt="def add(a, b):\n    return ", suffix="\n", raw=True,
                            options={"num_predict": 4, "temperature": 0})  # fmt: skip
    assert reply.done and 0 < reply.eval_count <= 4 and reply.prompt_eval_count > 10
    streamed = list(native.generate(model="fim:test", prompt="x = ", suffix="\n", stream=True, options={"num_predict": 3}))
    assert streamed[-1].done and sum(1 for p in streamed if p.done) == 1
    compatible = openai.OpenAI(base_url=fim_server.url + "/v1", api_key="unused", max_retries=0)
    completion = compatible.completions.create(model="fim:test", prompt="def f(", suffix="):\n", max_tokens=3, temperature=0)
    assert completion.choices[0].finish_reason in ("stop", "length") and completion.usage.completion_tokens <= 3
