"""Ollama ``/api/chat`` request → canonical request (docs/api-mapping.md §1, §4)."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest
import yaml

from dragoman.adapters.canonical import ImagePart, ResponseFormat, SamplingOptions, TextPart, Tool, ToolCall, ToolChoice
from dragoman.adapters.errors import RequestError
from dragoman.adapters.images import decode_base64_image, sniff_image_mime
from dragoman.adapters.ollama import ChatRequest, parse_keep_alive, to_canonical, wire
from tests.support.seed_spec import SEED_SPEC

SPEC = SEED_SPEC

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16
GIF = b"GIF89a" + b"\x00" * 16
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8
PNG_B64 = base64.b64encode(PNG).decode()


def decode(body: dict[str, Any]) -> ChatRequest:
    """As Litestar decodes the handler's ``data``."""
    return msgspec.json.decode(msgspec.json.encode(body), type=ChatRequest)


def convert(**fields: Any) -> Any:
    return to_canonical(decode({"model": "m", **fields}))


def user(content: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **extra}


# -- the wire Structs cover the seed spec ------------------------------------------------

SPEC_COMPONENTS = [
    ("ChatRequest", wire.ChatRequest),
    ("ChatMessage", wire.ChatMessage),
    ("ModelOptions", wire.ModelOptions),
    ("ToolDefinition", wire.ToolDefinition),
    ("ToolCall", wire.ToolCall),
    ("ChatResponse", wire.ChatResponse),
    ("Logprob", wire.Logprob),
    ("ErrorResponse", wire.ErrorResponse),
]


@pytest.mark.parametrize(("component", "struct"), SPEC_COMPONENTS, ids=[c for c, _ in SPEC_COMPONENTS])
def test_wire_struct_has_every_spec_field(component: str, struct: type[msgspec.Struct]) -> None:
    schema = yaml.safe_load(SPEC.read_text())["components"]["schemas"][component]
    missing = set(schema["properties"]) - set(struct.__struct_fields__)
    assert not missing, f"{struct.__name__} lacks {sorted(missing)}"


# -- decoding rejects wrong types and out-of-range values (400, not Ollama's 500) --------

DECODE_REJECTS = [
    ("temperature above 2", {"options": {"temperature": 2.5}}, "options.temperature"),
    ("temperature below 0", {"options": {"temperature": -0.1}}, "options.temperature"),
    ("top_p above 1", {"options": {"top_p": 1.01}}, "options.top_p"),
    ("min_p below 0", {"options": {"min_p": -0.5}}, "options.min_p"),
    ("top_k negative", {"options": {"top_k": -1}}, "options.top_k"),
    ("mirostat 3", {"options": {"mirostat": 3}}, "options.mirostat"),
    ("num_ctx a string", {"options": {"num_ctx": "big"}}, "options.num_ctx"),
    ("seed a float", {"options": {"seed": 1.5}}, "options.seed"),
    ("stop a number", {"options": {"stop": 5}}, "options.stop"),
    ("top_logprobs 21", {"top_logprobs": 21}, "top_logprobs"),
    ("top_logprobs negative", {"top_logprobs": -1}, "top_logprobs"),
    ("think a number", {"think": 5}, "think"),
    ("stream a string", {"stream": "yes"}, "stream"),
    ("keep_alive a bool", {"keep_alive": True}, "keep_alive"),
    ("images not a list", {"messages": [user(images="abc")]}, "messages[0].images"),
    ("tool call without name", {"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}, "name"),
]


@pytest.mark.parametrize(("name", "fields", "path"), DECODE_REJECTS, ids=[c[0] for c in DECODE_REJECTS])
def test_decoding_rejects(name: str, fields: dict[str, Any], path: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=path.replace("[", r"\[").replace("]", r"\]")):
        decode({"model": "m", **fields})


def test_decoding_ignores_unknown_fields() -> None:
    request = decode({"model": "m", "truncate": True, "options": {"num_gpu": 1}, "messages": [user(x=1)]})
    assert request.messages[0].content == "hi"


def test_defaults_stream_true_and_no_sampling_forced() -> None:
    request = convert(messages=[user()])
    assert request.stream is True
    assert request.options == SamplingOptions()  # unset stays unset: model defaults apply
    assert (request.think, request.think_level, request.keep_alive) == (None, None, None)
    assert request.response_format == ResponseFormat()


def test_empty_messages_is_a_load_request() -> None:
    assert convert().messages == []
    assert convert(messages=[]).messages == []


# -- keep_alive ----------------------------------------------------------------------------

KEEP_ALIVE = [
    ("absent", None, None),
    ("number seconds", 300, 300.0),
    ("fractional number", 1.5, 1.5),
    ("zero number", 0, 0.0),
    ("negative number is forever", -5, -1.0),
    ("minutes", "5m", 300.0),
    ("hours and minutes", "1h30m", 5400.0),
    ("milliseconds", "300ms", 0.3),
    ("fractional hours", "1.5h", 5400.0),
    ("zero string", "0", 0.0),
    ("minus one string", "-1", -1.0),
    ("negative duration", "-1m", -1.0),
    ("unitless positive", "10", ValueError),
    ("unknown unit", "5x", ValueError),
    ("empty", "", ValueError),
    ("garbage", "soon", ValueError),
]


@pytest.mark.parametrize(("name", "value", "expected"), KEEP_ALIVE, ids=[c[0] for c in KEEP_ALIVE])
def test_parse_keep_alive(name: str, value: Any, expected: Any) -> None:
    if expected is ValueError:
        with pytest.raises(ValueError):
            parse_keep_alive(value)
    else:
        assert parse_keep_alive(value) == (None if expected is None else pytest.approx(expected))


def test_bad_keep_alive_is_400_naming_the_field() -> None:
    with pytest.raises(RequestError) as info:
        convert(keep_alive="10")
    assert info.value.param == "keep_alive" and info.value.status == 400
    assert "keep_alive" in info.value.message
    assert convert(keep_alive="5m").keep_alive == 300.0


# -- think -------------------------------------------------------------------------------

THINK = [
    ("absent", None, (None, None)),
    ("true", True, (True, None)),
    ("false", False, (False, None)),
    ("low", "low", (True, "low")),
    ("medium", "medium", (True, "medium")),
    ("high", "high", (True, "high")),
    ("unknown level", "extreme", RequestError),
    ("string true", "true", RequestError),
    ("empty string", "", RequestError),
]


@pytest.mark.parametrize(("name", "value", "expected"), THINK, ids=[c[0] for c in THINK])
def test_think(name: str, value: Any, expected: Any) -> None:
    fields = {} if value is None else {"think": value}
    if expected is RequestError:
        with pytest.raises(RequestError) as info:
            convert(messages=[user()], **fields)
        assert info.value.param == "think"
        assert 'true, false, "low", "medium", "high"' in info.value.message
    else:
        request = convert(messages=[user()], **fields)
        assert (request.think, request.think_level) == expected


# -- format, top_logprobs ------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
FORMAT = [
    ("absent", None, ResponseFormat()),
    ("empty string is unset", "", ResponseFormat()),
    ("json", "json", ResponseFormat(type="json")),
    ("schema object", SCHEMA, ResponseFormat(type="json_schema", schema=SCHEMA)),
    ("other string", "yaml", RequestError),
]


@pytest.mark.parametrize(("name", "value", "expected"), FORMAT, ids=[c[0] for c in FORMAT])
def test_format(name: str, value: Any, expected: Any) -> None:
    fields = {} if value is None else {"format": value}
    if expected is RequestError:
        with pytest.raises(RequestError) as info:
            convert(**fields)
        assert info.value.param == "format" and "format" in info.value.message
    else:
        assert convert(**fields).response_format == expected


def test_top_logprobs_range_checked_without_decoding() -> None:
    with pytest.raises(RequestError) as info:
        to_canonical(ChatRequest(model="m", top_logprobs=25))
    assert info.value.param == "top_logprobs"
    request = convert(logprobs=True, top_logprobs=20)
    assert (request.logprobs, request.top_logprobs) == (True, 20)


# -- options -------------------------------------------------------------------------------


def test_options_every_field_maps() -> None:
    options = {
        "seed": 7, "temperature": 0.3, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "stop": ["</s>", "END"],
        "num_ctx": 4096, "num_predict": 128, "repeat_penalty": 1.1, "repeat_last_n": 64, "tfs_z": 1.0,
        "mirostat": 2, "mirostat_tau": 5.0, "mirostat_eta": 0.1, "presence_penalty": 0.5, "frequency_penalty": 0.25,
    }  # fmt: skip
    assert convert(options=options).options == SamplingOptions(**options)


def test_options_stop_string_becomes_list_and_unknown_keys_are_ignored() -> None:
    assert convert(options={"stop": "END", "numa": True}).options == SamplingOptions(stop=["END"])


# -- messages ------------------------------------------------------------------------------

ROLES = [
    ("system", "system", "system"),
    ("user", "user", "user"),
    ("assistant", "assistant", "assistant"),
    ("tool", "tool", "tool"),
    ("developer is system", "developer", "system"),
    ("upper case lowered as Ollama does", "USER", "user"),
    ("any other role is left to the template, as Ollama does", "Narrator", "narrator"),
    ("ipython (Llama 3 templates know it)", "ipython", "ipython"),
]


@pytest.mark.parametrize(("name", "role", "expected"), ROLES, ids=[c[0] for c in ROLES])
def test_roles(name: str, role: str, expected: str) -> None:
    assert convert(messages=[{"role": role, "content": "x"}]).messages[0].role == expected


def test_empty_role_is_400_naming_the_message() -> None:
    with pytest.raises(RequestError) as info:
        convert(messages=[user(), {"role": " ", "content": "x"}])
    assert info.value.param == "messages[1].role"
    assert info.value.message == "messages[1].role: must not be empty"


def test_content_defaults_to_empty_and_thinking_is_kept() -> None:
    message = convert(messages=[{"role": "assistant", "thinking": "hmm"}]).messages[0]
    assert message.parts == [] and message.thinking == "hmm"


IMAGES = [
    ("plain base64 png", PNG_B64, ImagePart(PNG, "image/png")),
    ("jpeg", base64.b64encode(JPEG).decode(), ImagePart(JPEG, "image/jpeg")),
    ("gif", base64.b64encode(GIF).decode(), ImagePart(GIF, "image/gif")),
    ("webp", base64.b64encode(WEBP).decode(), ImagePart(WEBP, "image/webp")),
    ("data URI prefix stripped (improve)", "data:image/png;base64," + PNG_B64, ImagePart(PNG, "image/png")),
    ("data URI with wrong type is sniffed", "data:image/jpeg;base64," + PNG_B64, ImagePart(PNG, "image/png")),
    ("data URI without type", "data:;base64," + PNG_B64, ImagePart(PNG, "image/png")),
    ("missing padding", PNG_B64.rstrip("="), ImagePart(PNG, "image/png")),
    ("line-wrapped base64", PNG_B64[:10] + "\n" + PNG_B64[10:], ImagePart(PNG, "image/png")),
]


@pytest.mark.parametrize(("name", "image", "expected"), IMAGES, ids=[c[0] for c in IMAGES])
def test_images(name: str, image: str, expected: ImagePart) -> None:
    message = convert(messages=[user("what is this?", images=[image])]).messages[0]
    assert message.parts == [expected, TextPart("what is this?")]


BAD_IMAGES = [
    ("not base64", "not base64!!", "not valid base64"),
    ("empty", "", "empty"),
    ("not an image", base64.b64encode(b"just some text").decode(), "not a recognised image"),
    ("data URI not base64", "data:image/png," + PNG_B64, "base64"),
]


@pytest.mark.parametrize(("name", "image", "reason"), BAD_IMAGES, ids=[c[0] for c in BAD_IMAGES])
def test_bad_image_is_400_naming_it(name: str, image: str, reason: str) -> None:
    with pytest.raises(RequestError) as info:
        convert(messages=[user(), user("look", images=[PNG_B64, image])])
    assert info.value.param == "messages[1].images[1]"
    assert info.value.message.startswith("messages[1].images[1]: ") and reason in info.value.message


def test_sniff_image_mime_unknown_is_none() -> None:
    assert sniff_image_mime(b"%PDF-1.7") is None
    assert decode_base64_image(PNG_B64, "x").mime_type == "image/png"


def test_tool_calls_object_and_string_arguments() -> None:
    calls = [
        {"id": "call_a", "function": {"index": 0, "name": "weather", "arguments": {"city": "Paris", "unit": "C"}}},
        {"function": {"name": "time", "arguments": '{"zone": "CET"}'}},
        {"function": {"name": "noargs", "arguments": ""}},
    ]
    message = convert(messages=[{"role": "assistant", "tool_calls": calls}]).messages[0]
    assert message.tool_calls == [
        ToolCall(name="weather", arguments={"city": "Paris", "unit": "C"}, id="call_a", index=0),
        ToolCall(name="time", arguments={"zone": "CET"}, id=None, index=1),
        ToolCall(name="noargs", arguments={}, id=None, index=2),
    ]
    assert list(message.tool_calls[0].arguments) == ["city", "unit"]  # key order kept


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]"], ids=["invalid JSON", "not an object"])
def test_malformed_string_arguments_are_400(arguments: str) -> None:
    calls = [{"function": {"name": "f", "arguments": arguments}}]
    with pytest.raises(RequestError) as info:
        convert(messages=[user(), {"role": "assistant", "tool_calls": calls}])
    assert info.value.param == "messages[1].tool_calls[0].function.arguments"


TOOL_RESULTS = [
    ("tool_name given", {"tool_name": "given"}, "given"),
    ("looked up from tool_call_id", {"tool_call_id": "call_2"}, "time"),
    ("unknown tool_call_id", {"tool_call_id": "call_x"}, None),
    ("tool_name wins over lookup", {"tool_name": "mine", "tool_call_id": "call_1"}, "mine"),
]


@pytest.mark.parametrize(("name", "fields", "expected"), TOOL_RESULTS, ids=[c[0] for c in TOOL_RESULTS])
def test_tool_result_name(name: str, fields: dict[str, Any], expected: str | None) -> None:
    calls = [
        {"id": "call_1", "function": {"name": "weather", "arguments": {}}},
        {"id": "call_2", "function": {"name": "time", "arguments": {}}},
    ]
    messages = [user(), {"role": "assistant", "tool_calls": calls}, {"role": "tool", "content": "12:00", **fields}]
    result = convert(messages=messages).messages[2]
    assert result.tool_name == expected
    assert result.tool_call_id == fields.get("tool_call_id")
    assert result.parts == [TextPart("12:00")]


def test_tools() -> None:
    tools = [
        {"type": "function", "function": {"name": "weather", "description": "Weather", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "bare"}},
    ]
    assert convert(tools=tools).tools == [Tool("weather", "Weather", SCHEMA), Tool("bare", None, {})]


TOOL_CHOICES = [
    # dragoman's extension (Ollama has no tool_choice), spelled as OpenAI spells it
    ("absent is auto", None, ToolChoice()),
    ("required", "required", ToolChoice(mode="required")),
    ("a named function", {"type": "function", "function": {"name": "bare"}}, ToolChoice(mode="function", name="bare")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "expected"), TOOL_CHOICES, ids=[c[0] for c in TOOL_CHOICES])
def test_tool_choice_extension(name: str, value: Any, expected: ToolChoice) -> None:
    tools = [{"type": "function", "function": {"name": "bare"}}]
    assert convert(tools=tools, **({"tool_choice": value} if value else {})).tool_choice == expected


def test_tool_choice_naming_an_unknown_tool_is_400() -> None:
    with pytest.raises(RequestError) as info:
        convert(tools=[{"type": "function", "function": {"name": "a"}}], tool_choice={"function": {"name": "b"}})
    assert info.value.param == "tool_choice.function.name"


def test_non_function_tool_is_400() -> None:
    with pytest.raises(RequestError) as info:
        convert(
            tools=[{"type": "function", "function": {"name": "a"}}, {"type": "retrieval", "function": {"name": "b"}}]
        )
    assert info.value.param == "tools[1].type"
