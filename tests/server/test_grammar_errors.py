"""A schema the grammar compiler refuses is raised by the ONNX backend, which knows no
dialect (it names the canonical ``response_format``): each client gets it naming the
field it wrote. On the real default model over real HTTP, with the official clients."""

from __future__ import annotations

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.support.server import RunningServer

BAD = {"type": "bogus"}  # llguidance: "Invalid type: bogus"


def test_each_dialect_names_its_own_schema_field(real_server: RunningServer) -> None:
    with pytest.raises(ollama.ResponseError) as native:
        ollama.Client(host=real_server.url).generate(model="smollm2:135m", prompt="x", format=BAD)  # type: ignore[arg-type]
    assert native.value.status_code == 400 and native.value.error.startswith("format: invalid constraint:")

    gpt = openai.OpenAI(base_url=real_server.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as chat:
        gpt.chat.completions.create(
            model="smollm2:135m", messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": BAD}},
        )  # fmt: skip
    assert chat.value.body["param"] == "response_format"  # type: ignore[index]
    assert chat.value.body["message"].startswith("response_format: invalid constraint:")  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as responses:
        gpt.responses.create(model="smollm2:135m", input="x", text={"format": {"type": "json_schema", "name": "x", "schema": BAD}})
    assert responses.value.body["param"] == "text.format"  # type: ignore[index]

    claude = anthropic.Anthropic(base_url=real_server.url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as messages:
        claude.messages.create(
            model="smollm2:135m", max_tokens=8, messages=[{"role": "user", "content": "x"}],
            extra_body={"output_config": {"format": {"type": "json_schema", "schema": BAD}}},
        )  # fmt: skip
    assert messages.value.body["error"]["message"].startswith("output_config.format: invalid constraint:")  # type: ignore[index]



def test_anthropic_json_schema_format_needs_its_schema(real_server: RunningServer) -> None:
    body = {"model": "smollm2:135m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
            "output_config": {"format": {"type": "json_schema"}}}  # fmt: skip
    r = httpx.post(real_server.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "output_config.format.schema: field required when output_config.format.type is 'json_schema'"
