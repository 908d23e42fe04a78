"""The GGUF reader and writer: every value type round-trips; tensors land aligned."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.gguf_file import Field, GgufError, TensorData, TensorInfo, ValueType, read_gguf, write_gguf

V = ValueType
FIELDS = [
    Field("u8", V.UINT8, 255),
    Field("i8", V.INT8, -128),
    Field("u16", V.UINT16, 65535),
    Field("i16", V.INT16, -32768),
    Field("u32", V.UINT32, 2**32 - 1),
    Field("i32", V.INT32, -(2**31)),
    Field("f32", V.FLOAT32, 0.5),
    Field("bool", V.BOOL, True),
    Field("string", V.STRING, "héllo"),
    Field("bytes that are not UTF-8", V.STRING, b"\xc3".decode("utf-8", "surrogateescape")),
    Field("u64", V.UINT64, 2**64 - 1),
    Field("i64", V.INT64, -(2**63)),
    Field("f64", V.FLOAT64, 1e300),
    Field("strings", V.ARRAY, ["a", "", "ç"], V.STRING),
    Field("ints", V.ARRAY, [1, -2, 3], V.INT32),
    Field("empty", V.ARRAY, [], V.FLOAT32),
]


@pytest.mark.parametrize("version", [2, 3])
def test_fields_and_tensors_round_trip(tmp_path: Path, version: int) -> None:
    source = tmp_path / "data.bin"
    source.write_bytes(bytes(range(256)) * 4)
    tensors = [
        TensorData(TensorInfo("a", (3,), 0, 0), source, 0),  # 12 bytes: the next one must be padded
        TensorData(TensorInfo("b", (32, 2), 8, 0), source, 100),  # Q8_0: 2 blocks of 34 bytes
    ]
    path = tmp_path / "m.gguf"
    write_gguf(path, FIELDS, tensors, version=version)
    back = read_gguf(path)
    assert back.version == version
    assert list(back.fields.values()) == FIELDS
    assert [(t.name, t.dims, t.type, t.offset) for t in back.tensors] == [("a", (3,), 0, 0), ("b", (32, 2), 8, 32)]
    raw = path.read_bytes()
    assert back.data_offset % 32 == 0
    assert raw[back.data_offset : back.data_offset + 12] == source.read_bytes()[:12]
    assert raw[back.data_offset + 32 : back.data_offset + 32 + 68] == source.read_bytes()[100:168]


def test_truncated_and_foreign_files_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, FIELDS, [])
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(GgufError, match="truncated"):
        read_gguf(path)
    path.write_bytes(b"GGUF")
    with pytest.raises(GgufError, match="truncated"):
        read_gguf(path)
    path.write_bytes(b"ggml" + bytes(12))
    with pytest.raises(GgufError, match="not a GGUF file"):
        read_gguf(path)
