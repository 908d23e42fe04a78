"""What to do with an Ollama model's Go template. dragoman cannot run Go templates, so:

1. the GGUF's own ``tokenizer.chat_template`` (Jinja, written by the model's authors)
   is used whenever the file has one — Ollama itself prefers it in that case too
   (``server/images.go``: ``PreferChatTemplate``);
2. otherwise a Go template whose special tokens identify one of five common
   conversation formats is replaced by that format's standard Jinja template (the
   Go template's tool-calling branches are not carried; the prepare output says so);
3. otherwise prepare refuses and asks for ``--template FILE.jinja``.
"""

from __future__ import annotations

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
# Gemma and Mistral have no system turn: a system message opens the first user turn.
_SPLIT_SYSTEM = (
    "{% if messages and messages[0]['role'] == 'system' %}{% set system = messages[0]['content'] | trim + '\\n\\n' %}"
    "{% set turns = messages[1:] %}{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
)
GEMMA = (
    "{{ bos_token }}" + _SPLIT_SYSTEM + "{% for message in turns %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' + (system if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
PHI3 = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}" + _SPLIT_SYSTEM + "{% for message in turns %}{% if message['role'] == 'assistant' %}"
    "{{ ' ' + message['content'] + eos_token }}{% else %}"
    "{{ '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}"
)

# (format, markers that must all appear in the Go template, Jinja template)
SHAPES: list[tuple[str, tuple[str, ...], str]] = [
    ("chatml", ("<|im_start|>", "<|im_end|>"), CHATML),
    ("llama3", ("<|start_header_id|>", "<|eot_id|>"), LLAMA3),
    ("gemma", ("<start_of_turn>", "<end_of_turn>"), GEMMA),
    ("phi3", ("<|user|>", "<|end|>"), PHI3),
    ("mistral", ("[INST]", "[/INST]"), MISTRAL),
]


def recognise(go_template: str) -> tuple[str, str] | None:
    """(format name, Jinja template) for a Go template of a known shape, else None."""
    for name, markers, jinja in SHAPES:
        if all(marker in go_template for marker in markers):
            return name, jinja
    return None
