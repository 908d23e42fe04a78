"""The YAML entry a build prints, and where ``--add-to`` inserts it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dragoman.backends.onnx.prepare.catalogue import Build, BuildRecord
from dragoman.backends.onnx.prepare.entry import insert_entry, yaml_entry

ENTRY = lambda indent: f"{indent}- name: new\n{indent}  backend: onnx\n"  # noqa: E731

INSERTS = [
    ("empty file", "", "models:\n  - name: new\n    backend: onnx\n"),
    ("no models key", "server:\n  port: 1\n", "server:\n  port: 1\nmodels:\n  - name: new\n    backend: onnx\n"),
    ("empty list", "models: []\naliases: {}\n", "models:\n  - name: new\n    backend: onnx\naliases: {}\n"),
    ("indented items, then a key",
     "models:\n  - name: a\n    backend: x\n\n# aliases follow\naliases:\n  b: a\n",
     "models:\n  - name: a\n    backend: x\n  - name: new\n    backend: onnx\n\n# aliases follow\naliases:\n  b: a\n"),
    ("items at column 0", "models:\n- name: a\n  backend: x\n", "models:\n- name: a\n  backend: x\n- name: new\n  backend: onnx\n"),
    ("comment on the key", "models:  # mine\n  - name: a\n", "models:  # mine\n  - name: a\n  - name: new\n    backend: onnx\n"),
    ("no newline at the end", "models:\n  - name: a", "models:\n  - name: a\n  - name: new\n    backend: onnx\n"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "text", "expected"), INSERTS, ids=[i[0] for i in INSERTS])
def test_insert_entry(case: str, text: str, expected: str) -> None:
    assert insert_entry(text, ENTRY) == expected


def test_the_printed_entry_is_yaml_for_the_config() -> None:
    record = BuildRecord(name="qwen2.5:0.5b", provider="dml", context_length=32768,
                         defaults={"stop": ["<|im_end|>"], "temperature": 0.7}, system='Say "hi":\n')  # fmt: skip
    text = yaml_entry(Build("qwen2.5-0.5b-int4-dml", Path("/m/qwen2.5-0.5b-int4-dml"), record), "qwen2.5:0.5b")
    assert yaml.safe_load(text) == [{
        "name": "qwen2.5:0.5b", "backend": "onnx", "model": "qwen2.5-0.5b-int4-dml", "provider": "dml",
        "context_length": 4096, "defaults": {"stop": ["<|im_end|>"], "temperature": 0.7}, "system": 'Say "hi":\n',
    }]  # fmt: skip
    assert "# the model allows 32768" in text
