"""OpenAI client requests → canonical requests (docs/api-mapping.md §1, §2, §6)."""

from __future__ import annotations

import base64
from typing import Any, Callable

import msgspec
import pytest
import yaml

from dragoman.adapters.canonical import ChatRequest, ImagePart, ResponseFormat, TextPart, ToolCall, ToolChoice
from dragoman.adapters.errors import RequestError
from dragoman.adapters.openai import wire
from dragoman.adapters.openai.convert import to_canonical
from tests.support.seed_spec import SEED_SPEC

SPEC = SEED_SPEC

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
JPEG = b"\xff\xd8\xff\xe0" + bytes(24)
PNG_URI = "data:image/png;base64," + base64.b64encode(PNG).decode()
# Declared png, actually jpeg: the bytes decide.
MISLABELLED_JPEG_URI = "data:image/png;base64," + base64.b64encode(JPEG).decode()
BLANK_MIME_URI = "data:;base64," + base64.b64encode(PNG).decode()

USER_HI = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def decode(body: dict[str, Any]) -> wire.ChatCompletionRequest:
    """As Litestar does it: JSON bytes into the wire struct."""
    return msgspec.json.decode(msgspec.json.encode(body), type=wire.ChatCompletionRequest)


def convert(**fields: Any) -> ChatRequest:
    body = {"model": "m", "messages": USER_HI} | fields
    return to_canonical(decode(body))


def assistant_call(call_id: str, name: str, arguments: Any = "{}") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


# -- the wire structs cover the spec -----------------------------------------------------


def spec_schemas() -> dict[str, Any]:
    return yaml.safe_load(SPEC.read_text())["components"]["schemas"]


SPEC_STRUCTS = [
    ("ChatCompletionRequest", wire.ChatCompletionRequest),
    ("ChatCompletionMessage", wire.ChatCompletionMessage),
    ("ContentPart", wire.ContentPart),
    ("OpenAIToolDefinition", wire.OpenAIToolDefinition),
    ("OpenAIToolCall", wire.OpenAIToolCall),
    ("ChatCompletionResponse", wire.ChatCompletionResponse),
    ("ChatCompletionChoice", wire.ChatCompletionChoice),
    ("ChatCompletionStreamResponse", wire.ChatCompletionStreamResponse),
    ("UsageStats", wire.UsageStats),
    ("Logprob", wire.Logprob),
]


@pytest.mark.parametrize(("component", "struct"), SPEC_STRUCTS, ids=[c for c, _ in SPEC_STRUCTS])
def test_every_spec_field_exists_on_the_wire_struct(component: str, struct: type[msgspec.Struct]) -> None:
    properties = set(spec_schemas()[component]["properties"])
    assert properties - set(struct.__struct_fields__) == set()


def test_spec_required_request_fields_are_required() -> None:
    info = msgspec.inspect.type_info(wire.ChatCompletionRequest)
    required = {f.name for f in info.fields if f.required}
    assert required == set(spec_schemas()["ChatCompletionRequest"]["required"])


REAL_API_FIELDS = [
    "max_completion_tokens", "stream_options", "tool_choice", "parallel_tool_calls", "reasoning_effort",
    "reasoning", "logprobs", "top_logprobs", "n", "logit_bias", "user", "metadata", "store",
    "top_k", "min_p", "repeat_penalty", "keep_alive",
]  # fmt: skip


def test_real_api_fields_exist_on_the_request_struct() -> None:
    assert set(REAL_API_FIELDS) - set(wire.ChatCompletionRequest.__struct_fields__) == set()


def test_unknown_fields_are_tolerated() -> None:
    request = decode({"model": "m", "messages": USER_HI, "service_tier": "auto", "prediction": {}})
    assert request.model == "m"


TYPE_ERRORS = [
    ("temperature above 2", {"temperature": 2.5}, "temperature"),
    ("top_p above 1", {"top_p": 1.5}, "top_p"),
    ("presence_penalty below -2", {"presence_penalty": -3}, "presence_penalty"),
    ("unknown role", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("response_format type", {"response_format": {"type": "yaml"}}, "response_format.type"),
]


@pytest.mark.parametrize(("name", "fields", "path"), TYPE_ERRORS, ids=[c[0] for c in TYPE_ERRORS])
def test_type_errors_name_the_field(name: str, fields: dict[str, Any], path: str) -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        decode({"model": "m", "messages": USER_HI} | fields)
    assert str(caught.value).endswith(f"at `$.{path}`")


# -- field mapping -----------------------------------------------------------------------

Getter = Callable[[ChatRequest], Any]

FIELD_CASES: list[tuple[str, dict[str, Any], Getter, Any]] = [
    # improve: Ollama forces temperature/top_p to 1.0 when absent.
    ("temperature absent stays unset", {}, lambda r: r.options.temperature, None),
    ("top_p absent stays unset", {}, lambda r: r.options.top_p, None),
    ("temperature present", {"temperature": 0.2}, lambda r: r.options.temperature, 0.2),
    ("temperature zero is kept", {"temperature": 0}, lambda r: r.options.temperature, 0.0),
    ("top_p present", {"top_p": 0.9}, lambda r: r.options.top_p, 0.9),
    ("max_tokens", {"max_tokens": 50}, lambda r: r.options.num_predict, 50),
    # improve: Ollama ignores max_completion_tokens.
    ("max_completion_tokens", {"max_completion_tokens": 60}, lambda r: r.options.num_predict, 60),
    ("max_completion_tokens wins", {"max_tokens": 5, "max_completion_tokens": 60}, lambda r: r.options.num_predict, 60),
    ("stop string becomes a list", {"stop": "END"}, lambda r: r.options.stop, ["END"]),
    ("stop list", {"stop": ["a", "b"]}, lambda r: r.options.stop, ["a", "b"]),
    ("empty stop strings dropped", {"stop": ""}, lambda r: r.options.stop, None),
    ("seed", {"seed": 7}, lambda r: r.options.seed, 7),
    ("penalties", {"presence_penalty": 0.5, "frequency_penalty": -0.5},
     lambda r: (r.options.presence_penalty, r.options.frequency_penalty), (0.5, -0.5)),
    ("vLLM-style extra sampling fields", {"top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1},
     lambda r: (r.options.top_k, r.options.min_p, r.options.repeat_penalty), (40, 0.05, 1.1)),
    ("repeat_penalty is not frequency_penalty", {"repeat_penalty": 1.1}, lambda r: r.options.frequency_penalty, None),
    ("response_format absent", {}, lambda r: r.response_format, ResponseFormat()),
    ("response_format text", {"response_format": {"type": "text"}}, lambda r: r.response_format, ResponseFormat()),
    ("response_format json_object", {"response_format": {"type": "json_object"}},
     lambda r: r.response_format, ResponseFormat(type="json")),
    ("response_format json_schema",
     {"response_format": {"type": "json_schema", "json_schema": {"name": "city", "strict": True,
                                                                  "schema": {"type": "object"}}}},
     lambda r: r.response_format, ResponseFormat(type="json_schema", schema={"type": "object"}, name="city", strict=True)),
    ("reasoning absent", {}, lambda r: (r.think, r.think_level), (None, None)),
    ("reasoning_effort none turns thinking off", {"reasoning_effort": "none"}, lambda r: (r.think, r.think_level), (False, None)),
    ("reasoning_effort minimal is low", {"reasoning_effort": "minimal"}, lambda r: (r.think, r.think_level), (True, "low")),
    ("reasoning_effort low", {"reasoning_effort": "low"}, lambda r: (r.think, r.think_level), (True, "low")),
    ("reasoning_effort medium", {"reasoning_effort": "medium"}, lambda r: (r.think, r.think_level), (True, "medium")),
    ("reasoning_effort high", {"reasoning_effort": "high"}, lambda r: (r.think, r.think_level), (True, "high")),
    ("reasoning.effort wins", {"reasoning_effort": "low", "reasoning": {"effort": "high"}},
     lambda r: (r.think, r.think_level), (True, "high")),
    ("reasoning without effort defers to the flat field", {"reasoning_effort": "low", "reasoning": {}},
     lambda r: r.think_level, "low"),
    # improve: Ollama ignores tool_choice.
    ("tool_choice absent", {"tools": [WEATHER_TOOL]}, lambda r: r.tool_choice, ToolChoice()),
    ("tool_choice none", {"tools": [WEATHER_TOOL], "tool_choice": "none"}, lambda r: r.tool_choice, ToolChoice(mode="none")),
    ("tool_choice auto", {"tools": [WEATHER_TOOL], "tool_choice": "auto"}, lambda r: r.tool_choice, ToolChoice()),
    ("tool_choice required", {"tools": [WEATHER_TOOL], "tool_choice": "required"},
     lambda r: r.tool_choice, ToolChoice(mode="required")),
    ("tool_choice named function",
     {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     lambda r: r.tool_choice, ToolChoice(mode="function", name="get_weather")),
    ("tools", {"tools": [WEATHER_TOOL]}, lambda r: [(t.name, t.parameters["type"]) for t in r.tools], [("get_weather", "object")]),
    ("logprobs", {"logprobs": True, "top_logprobs": 5}, lambda r: (r.logprobs, r.top_logprobs), (True, 5)),
    ("top_logprobs bounds", {"logprobs": True, "top_logprobs": 20}, lambda r: r.top_logprobs, 20),
    ("logprobs default off", {}, lambda r: (r.logprobs, r.top_logprobs), (False, 0)),
    ("stream defaults to false", {}, lambda r: r.stream, False),
    ("stream", {"stream": True, "stream_options": {"include_usage": True}}, lambda r: r.stream, True),
    ("n=1 accepted", {"n": 1}, lambda r: r.model, "m"),
    ("empty logit_bias accepted", {"logit_bias": {}}, lambda r: r.model, "m"),
    ("accepted and ignored fields", {"user": "u", "metadata": {"k": "v"}, "store": False}, lambda r: r.model, "m"),
    ("parallel calls off", {"parallel_tool_calls": False}, lambda r: r.parallel_tool_calls, False),
    ("parallel calls on is the default", {"parallel_tool_calls": True}, lambda r: r.parallel_tool_calls, None),
    ("keep_alive seconds", {"keep_alive": 10}, lambda r: r.keep_alive, 10.0),
    ("keep_alive duration", {"keep_alive": "5m"}, lambda r: r.keep_alive, 300.0),
    ("keep_alive forever", {"keep_alive": -1}, lambda r: r.keep_alive, -1.0),
    ("keep_alive absent", {}, lambda r: r.keep_alive, None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "get", "expected"), FIELD_CASES, ids=[c[0] for c in FIELD_CASES])
def test_field_mapping(name: str, fields: dict[str, Any], get: Getter, expected: Any) -> None:
    assert get(convert(**fields)) == expected


# -- messages ----------------------------------------------------------------------------

MESSAGE_CASES: list[tuple[str, list[dict[str, Any]], Getter, Any]] = [
    ("string content", USER_HI, lambda r: r.messages[0].parts, [TextPart("hi")]),
    ("null content", [{"role": "user", "content": None}], lambda r: r.messages[0].parts, []),
    # improve: Ollama passes "developer" through as an unknown role.
    ("developer is system", [{"role": "developer", "content": "be brief"}],
     lambda r: (r.messages[0].role, r.messages[0].text), ("system", "be brief")),
    ("name kept", [{"role": "user", "content": "x", "name": "ann"}], lambda r: r.messages[0].name, "ann"),
    # improve: Ollama splits the parts of one message into one message each.
    ("text and image parts stay in one message",
     [{"role": "user", "content": [{"type": "text", "text": "what is"}, {"type": "image_url", "image_url": {"url": PNG_URI}},
                                   {"type": "text", "text": " this?"}]}],
     lambda r: (len(r.messages), r.messages[0].parts),
     (1, [TextPart("what is"), ImagePart(data=PNG, mime_type="image/png"), TextPart(" this?")])),
    ("image mime sniffed from the bytes",
     [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": MISLABELLED_JPEG_URI}}]}],
     lambda r: r.messages[0].images, [ImagePart(data=JPEG, mime_type="image/jpeg")]),
    ("blank mime data uri", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": BLANK_MIME_URI}}]}],
     lambda r: r.messages[0].images[0].mime_type, "image/png"),
    ("image_url given as a bare string", [{"role": "user", "content": [{"type": "image_url", "image_url": PNG_URI}]}],
     lambda r: r.messages[0].images[0].data, PNG),
    ("assistant tool call arguments string → object",
     [*USER_HI, assistant_call("call_1", "get_weather", '{"city":"Paris","days":2}')],
     lambda r: r.messages[1].tool_calls,
     [ToolCall(name="get_weather", arguments={"city": "Paris", "days": 2}, id="call_1", index=0)]),
    ("argument key order kept", [*USER_HI, assistant_call("c", "f", '{"z":1,"a":2}')],
     lambda r: list(r.messages[1].tool_calls[0].arguments), ["z", "a"]),
    # improve: Ollama 400s on "".
    ("empty arguments string is {}", [*USER_HI, assistant_call("c", "f", "")],
     lambda r: r.messages[1].tool_calls[0].arguments, {}),
    ("object arguments accepted", [*USER_HI, assistant_call("c", "f", {"x": 1})],
     lambda r: r.messages[1].tool_calls[0].arguments, {"x": 1}),
    ("parallel calls keep their positions",
     [*USER_HI, {"role": "assistant", "tool_calls": [
         {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
         {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}],
     lambda r: [(c.id, c.name, c.index) for c in r.messages[1].tool_calls], [("a", "f", 0), ("b", "g", 1)]),
    ("tool result finds its function name",
     [*USER_HI, assistant_call("call_1", "get_weather"), {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
     lambda r: (r.messages[2].tool_call_id, r.messages[2].tool_name, r.messages[2].text), ("call_1", "get_weather", "sunny")),
    ("tool result lookup searches backwards",
     [*USER_HI, assistant_call("dup", "old"), {"role": "tool", "tool_call_id": "dup", "content": "1"},
      assistant_call("dup", "new"), {"role": "tool", "tool_call_id": "dup", "content": "2"}],
     lambda r: (r.messages[2].tool_name, r.messages[4].tool_name), ("old", "new")),
    ("tool result with unknown id keeps its name field",
     [{"role": "tool", "tool_call_id": "zzz", "name": "lookup", "content": "x"}],
     lambda r: r.messages[0].tool_name, "lookup"),
    # Ollama loses tool_call_id when a tool message's content is an array.
    ("tool result with array content keeps its id",
     [*USER_HI, assistant_call("call_9", "f"), {"role": "tool", "tool_call_id": "call_9",
                                                 "content": [{"type": "text", "text": "42"}]}],
     lambda r: (r.messages[2].tool_call_id, r.messages[2].tool_name, r.messages[2].text), ("call_9", "f", "42")),
    ("assistant reasoning is thinking", [*USER_HI, {"role": "assistant", "content": "4", "reasoning": "2+2"}],
     lambda r: r.messages[1].thinking, "2+2"),
    ("assistant reasoning_content is thinking", [*USER_HI, {"role": "assistant", "content": "4", "reasoning_content": "2+2"}],
     lambda r: r.messages[1].thinking, "2+2"),
    ("reasoning on a user message is ignored", [{"role": "user", "content": "x", "reasoning": "r"}],
     lambda r: r.messages[0].thinking, None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "messages", "get", "expected"), MESSAGE_CASES, ids=[c[0] for c in MESSAGE_CASES])
def test_message_mapping(name: str, messages: list[dict[str, Any]], get: Getter, expected: Any) -> None:
    assert get(convert(messages=messages)) == expected


# -- refusals ----------------------------------------------------------------------------

AUDIO_PART = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}

ERROR_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("unsupported part type",
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, AUDIO_PART]}]},
     "messages[0].content[1].type", "unsupported content part type 'input_audio'"),
    ("remote image url",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}]},
     "messages[0].content[0].image_url.url", "remote image URLs are not fetched"),
    ("other url scheme",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]},
     "messages[0].content[0].image_url.url", "not fetched"),
    ("image that is not base64",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}]},
     "messages[0].content[0].image_url.url", "base64"),
    ("bytes that are not an image",
     {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                 "image_url": {"url": "data:;base64," + base64.b64encode(b"hello").decode()}}]}]},
     "messages[0].content[0].image_url.url", "not a recognised image"),
    ("text part without text", {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text", "required"),
    ("image part without image_url", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0].image_url", "required"),
    ("arguments not JSON", {"messages": [*USER_HI, assistant_call("c", "f", "{city: Paris")]},
     "messages[1].tool_calls[0].function.arguments", "not valid JSON"),
    ("arguments not an object", {"messages": [*USER_HI, assistant_call("c", "f", "[1, 2]")]},
     "messages[1].tool_calls[0].function.arguments", "must be a JSON object"),
    ("unknown reasoning_effort", {"reasoning_effort": "extreme"},
     "reasoning_effort", "allowed: none, minimal, low, medium, high"),
    ("unknown reasoning.effort", {"reasoning": {"effort": "max"}}, "reasoning.effort", "'max'"),
    ("top_logprobs above 20", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "between 0 and 20"),
    ("top_logprobs negative", {"logprobs": True, "top_logprobs": -1}, "top_logprobs", "between 0 and 20"),
    ("top_logprobs without logprobs", {"top_logprobs": 3}, "top_logprobs", "requires logprobs"),
    ("top_logprobs with logprobs false", {"logprobs": False, "top_logprobs": 3}, "top_logprobs", "requires logprobs"),
    ("logit_bias key not a token id", {"logit_bias": {"the": -100}}, "logit_bias", "keys are token ids"),
    ("logit_bias negative key", {"logit_bias": {"-1": 5}}, "logit_bias", "keys are token ids"),
    ("logit_bias past -100", {"logit_bias": {"7": -101}}, "logit_bias", "between -100 and 100"),
    ("logit_bias too many entries", {"logit_bias": {str(i): 1 for i in range(1025)}}, "logit_bias", "at most 1024"),
    ("unknown tool_choice", {"tools": [WEATHER_TOOL], "tool_choice": "sometimes"}, "tool_choice", "allowed: none, auto, required"),
    ("tool_choice names a missing tool",
     {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name", "no tool named 'nope'"),
    ("tool_choice required without tools", {"tool_choice": "required"}, "tool_choice", "needs at least one tool"),
    ("json_schema without json_schema", {"response_format": {"type": "json_schema"}}, "response_format.json_schema", "required"),
    ("keep_alive without unit", {"keep_alive": "10"}, "keep_alive", "no unit"),
    ("keep_alive nonsense", {"keep_alive": "soon"}, "keep_alive", "not valid"),
    ("no messages", {"messages": []}, "messages", "must not be empty"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "param", "message"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_refusals_name_the_field(name: str, fields: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        convert(**fields)
    assert caught.value.status == 400
    assert caught.value.param == param
    assert caught.value.message.startswith(f"{param}: ")
    assert message in caught.value.message


def test_return_progress_is_a_streams() -> None:
    assert convert(return_progress=True, stream=True).return_progress
    assert not convert(return_progress=True).return_progress  # a whole reply has no chunk to carry it


def test_logit_bias_is_token_ids_to_biases() -> None:
    assert convert(logit_bias={"50256": -100, "7": 2.5}).logit_bias == {50256: -100.0, 7: 2.5}
    assert convert(logit_bias={}).logit_bias is None
