"""The GGUF reader and writer: every value type round-trips; tensors land aligned."""

from __future__ import annotations

import struct
import tracemalloc
from array import array
from pathlib import Path

import pytest

from dragoman.backends.gguf_file import Field, GgufError, TensorData, TensorInfo, ValueType, read_gguf, write_gguf

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
    Field("ints", V.ARRAY, array("i", [1, -2, 3]), V.INT32),
    Field("bools", V.ARRAY, array("B", [1, 0]), V.BOOL),
    Field("empty", V.ARRAY, array("f"), V.FLOAT32),
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


def _raw_gguf(path: Path, *entries: bytes) -> Path:
    """A version-3 GGUF of ``entries`` (each a key/type/value already packed), no tensors:
    what a hostile writer can put there, which ``write_gguf`` would not write."""
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries))
    return path


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


def _alignment_u32(value: int) -> bytes:
    return _key("general.alignment") + struct.pack("<II", V.UINT32, value)


HOSTILE = {
    "alignment 0": (_alignment_u32(0), "'general.alignment' is 0, not a positive power of two"),
    "alignment 48": (_alignment_u32(48), "'general.alignment' is 48, not a positive power of two"),
    "alignment -32": (
        _key("general.alignment") + struct.pack("<Ii", V.INT32, -32),
        "'general.alignment' is -32, not a positive power of two",
    ),
    "alignment string": (
        _key("general.alignment") + struct.pack("<IQ", V.STRING, 2) + b"32",
        "'general.alignment' is a string, not an integer",
    ),
    "alignment float": (
        _key("general.alignment") + struct.pack("<If", V.FLOAT32, 32.0),
        "'general.alignment' is a float32, not an integer",
    ),
    "array of arrays": (
        _key("nested") + struct.pack("<IIQ", V.ARRAY, V.ARRAY, 1) + struct.pack("<IQ", V.UINT8, 1) + b"x",
        "'nested' is an array of arrays",
    ),
    "array past the end": (
        _key("long") + struct.pack("<IIQ", V.ARRAY, V.UINT32, 1000) + bytes(8),
        "'long' runs past the end of the file",
    ),
    "array count 2^63": (
        _key("huge") + struct.pack("<IIQ", V.ARRAY, V.UINT64, 2**63),
        "'huge' runs past the end of the file",
    ),
    "unknown item type": (_key("odd") + struct.pack("<IIQ", V.ARRAY, 99, 1), "'odd' has unknown value type 99"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_metadata_is_a_clean_error_naming_key_and_file(tmp_path: Path, case: str) -> None:
    entry, message = HOSTILE[case]
    path = _raw_gguf(tmp_path / "hostile.gguf", entry)
    with pytest.raises(GgufError) as caught:
        read_gguf(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_valid_alignment_places_the_data(tmp_path: Path) -> None:
    path = _raw_gguf(tmp_path / "m.gguf", _alignment_u32(64))
    back = read_gguf(path)
    assert back.alignment == 64 and back.data_offset == 64  # 63 header bytes, rounded up


def test_a_40_mb_array_costs_about_its_size(tmp_path: Path) -> None:
    """Numeric arrays are ``array.array``s: one byte per u8, not a list of Python ints
    (which cost 662 MB for this file)."""
    size = 40 << 20
    path = tmp_path / "big.gguf"
    with open(path, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _key("blob") + struct.pack("<IIQ", V.ARRAY, V.UINT8, size))
        out.truncate(out.tell() + size)
    tracemalloc.start()
    try:
        header = read_gguf(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(header.get("blob")) == size
    assert peak < 1.5 * size, f"reading a {size >> 20} MiB array peaked at {peak >> 20} MiB"
