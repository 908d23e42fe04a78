"""Chat templates rendered with the sandboxed Jinja environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dragoman.adapters.canonical import Message, TextPart, Tool, ToolCall
from dragoman.adapters.errors import RequestError
from dragoman.backends.text.chat_template import load_chat_template, render_chat, special_tokens, supports_thinking, supports_tools

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# A template that knows tools and thinking, in the style of Qwen3's. (trim_blocks
# eats the newline after a block tag, as in transformers.)
NATIVE = (
    "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }}{{ t | tojson }};{% endfor %}\n{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
    "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %}"
    "{% if m.role == 'tool' %} id={{ m.tool_call_id }} name={{ m.name }}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}"
)
WEATHER = Tool(
    name="get_weather",
    description="Weather of a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def user(text: str) -> Message:
    return Message(role="user", parts=[TextPart(text)])


HISTORY = [
    Message(role="system", parts=[TextPart("Be brief.")]),
    user("Weather in Paris?"),
    Message(role="assistant", tool_calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_1")]),
    Message(role="tool", parts=[TextPart("18C")], tool_call_id="call_1", tool_name="get_weather"),
]

CASES = [
    ("plain chatml", CHATML, [user("Hi")], None, None, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    (
        "tools described in the system prompt when the template has none",
        CHATML,
        [user("Hi")],
        [WEATHER],
        None,
        "<|im_start|>system\n# Tools\n",
    ),
    (
        "tool history as text for a template without tools",
        CHATML,
        HISTORY,
        [WEATHER],
        None,
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>",
    ),
    ("native tools passed through", NATIVE, [user("Hi")], [WEATHER], None, 'TOOLS:get_weather{"type": "function"'),
    (
        "native tool history",
        NATIVE,
        HISTORY,
        [WEATHER],
        None,
        '[assistant]CALL get_weather {"city": "Paris"}[tool]18C id=call_1 name=get_weather',
    ),
    ("enable_thinking false reaches the template", NATIVE, [user("Hi")], None, False, "[assistant]<think></think>"),
    ("enable_thinking unset", NATIVE, [user("Hi")], None, None, "[user]Hi[assistant]"),
]


@pytest.mark.parametrize(
    ("name", "template", "messages", "tools", "think", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_render(
    name: str, template: str, messages: list[Message], tools: list[Tool] | None, think: bool | None, expected: str
) -> None:
    assert expected in render_chat(template, messages, tools, enable_thinking=think)


def test_hermes_prompt_carries_the_tool_schema_and_keeps_the_system_text() -> None:
    prompt = render_chat(CHATML, HISTORY, [WEATHER])
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    tools_json = prompt.split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(tools_json)["function"]["parameters"] == WEATHER.parameters
    assert '<tool_call>\n{"name": <function-name>' in prompt


def test_raise_exception_is_a_request_error() -> None:
    template = "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    with pytest.raises(RequestError, match="first must be user"):
        render_chat(template, [Message(role="assistant", parts=[TextPart("x")])])


def test_any_role_reaches_the_template() -> None:
    prompt = render_chat(CHATML, [Message(role="ipython", parts=[TextPart("42")])])
    assert prompt.startswith("<|im_start|>ipython\n42<|im_end|>")


ROLE_REFUSALS = [
    ("a template that raises on it",
     "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role') }}{% endif %}"
     "{{ m.content }}{% endfor %}"),
    ("a template that leaves it out",
     "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "template"), ROLE_REFUSALS, ids=[c[0] for c in ROLE_REFUSALS])
def test_a_role_the_template_cannot_render_is_400_naming_it(name: str, template: str) -> None:
    with pytest.raises(RequestError) as info:
        render_chat(template, [user("hi"), Message(role="narrator", parts=[TextPart("Once upon a time")])])
    assert info.value.param == "messages[1].role"
    assert "cannot render role 'narrator'" in info.value.message


def test_sandbox_refuses_unsafe_access() -> None:
    with pytest.raises(RequestError, match="failed to render"):
        render_chat("{{ ''.__class__.__mro__[1].__subclasses__() }}", [user("x")])


def test_strftime_and_special_tokens() -> None:
    prompt = render_chat("{{ bos_token }}{{ strftime_now('%Y') }}", [user("x")], tokens={"bos_token": "<s>"})
    assert prompt.startswith("<s>20")


def test_no_template_is_a_clear_error() -> None:
    with pytest.raises(RequestError, match="no chat template"):
        render_chat("", [user("x")])


LOADS = [
    (
        "jinja file wins",
        {"chat_template.jinja": "FILE", "tokenizer_config.json": '{"chat_template": "CFG"}'},
        None,
        "FILE",
    ),
    ("tokenizer_config string", {"tokenizer_config.json": '{"chat_template": "CFG"}'}, None, "CFG"),
    (
        "named list picks default",
        {
            "tokenizer_config.json": '{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}'
        },
        None,
        "D",
    ),
    ("setting overrides", {"chat_template.jinja": "FILE"}, "SETTING", "SETTING"),
    ("nothing", {}, None, ""),
]


@pytest.mark.parametrize(("name", "files", "override", "expected"), LOADS, ids=[c[0] for c in LOADS])
def test_load_chat_template(
    tmp_path: Path, name: str, files: dict[str, str], override: str | None, expected: str
) -> None:
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    assert load_chat_template(tmp_path, override) == expected


def test_special_tokens_accepts_strings_and_objects(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        '{"bos_token": "<s>", "eos_token": {"content": "</s>"}, "pad_token": null}'
    )
    assert special_tokens(tmp_path) == {"bos_token": "<s>", "eos_token": "</s>"}


def test_feature_detection() -> None:
    assert (supports_tools(CHATML), supports_thinking(CHATML)) == (False, False)
    assert (supports_tools(NATIVE), supports_thinking(NATIVE)) == (True, True)


def test_the_real_smollm2_template(model_dir: Path) -> None:
    template = load_chat_template(model_dir)
    prompt = render_chat(template, [user("What is the capital of France?")])
    assert prompt.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert not supports_tools(template) and not supports_thinking(template)
