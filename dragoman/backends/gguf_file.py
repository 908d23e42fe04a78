"""Just enough of the GGUF container to sniff a model file and rewrite one: the header,
the key/value metadata and the tensor table, read with ``struct`` (no ``gguf`` package,
so ``dragoman config check`` and ``dragoman models prepare``'s up-front checks can sniff
without the build tools). Shared by the ctransformers backend and the ONNX model builder.

Layout (little-endian): ``GGUF``, u32 version, tensor and key counts, the keys
(string, u32 type, value), the tensor infos (name, dims, u32 type, u64 offset), then
the tensor data at the next multiple of ``general.alignment`` (32). Version 1 wrote
counts, string lengths and dims as u32; versions 2 and 3 as u64 (3 only added
big-endian files, which this reader refuses).
"""

from __future__ import annotations

import enum
import mmap
import struct
import sys
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32


class ValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_SCALAR_FORMAT = {
    ValueType.UINT8: "B",
    ValueType.INT8: "b",
    ValueType.UINT16: "H",
    ValueType.INT16: "h",
    ValueType.UINT32: "I",
    ValueType.INT32: "i",
    ValueType.FLOAT32: "f",
    ValueType.BOOL: "?",
    ValueType.UINT64: "Q",
    ValueType.INT64: "q",
    ValueType.FLOAT64: "d",
}

# ggml tensor types: (elements per block, bytes per block). Names as ggml spells them.
TENSOR_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    30: ("BF16", 1, 2),
}


class GgufError(ValueError):
    """Not a GGUF file this reader understands; the message says why."""


class Field(msgspec.Struct, frozen=True):
    """One metadata entry. ``item_type`` is set for arrays, whose ``value`` is a list of
    strings or, for numbers and booleans, an ``array.array`` (one machine value per item:
    a list of Python ints costs ~16× the file's bytes, and a hostile file may hold a
    40 MB array)."""

    key: str
    type: ValueType
    value: Any
    item_type: ValueType | None = None


class TensorInfo(msgspec.Struct, frozen=True):
    name: str
    dims: tuple[int, ...]  # ggml order: dims[0] is the row length
    type: int
    offset: int  # from the start of the data section

    @property
    def type_name(self) -> str:
        return TENSOR_TYPES[self.type][0] if self.type in TENSOR_TYPES else f"type {self.type}"

    @property
    def nbytes(self) -> int:
        if self.type not in TENSOR_TYPES:
            raise GgufError(f"tensor '{self.name}' has ggml type {self.type}, whose size this reader does not know")
        _, block, size = TENSOR_TYPES[self.type]
        elements = 1
        for dim in self.dims:
            elements *= dim
        return elements // block * size


class GgufFile(msgspec.Struct, frozen=True):
    version: int
    fields: dict[str, Field]
    tensors: list[TensorInfo]
    data_offset: int  # absolute file offset of the tensor data

    @property
    def alignment(self) -> int:
        field = self.fields.get("general.alignment")
        return int(field.value) if field is not None else DEFAULT_ALIGNMENT  # checked by _alignment on reading

    def get(self, key: str, default: Any = None) -> Any:
        field = self.fields.get(key)
        return default if field is None else field.value


class _Cursor:
    def __init__(self, buffer: Any, version: int) -> None:
        self.buffer = buffer
        self.pos = 0
        self.size_format = "<I" if version == 1 else "<Q"

    def unpack(self, fmt: str) -> Any:
        try:
            values = struct.unpack_from(fmt, self.buffer, self.pos)
        except struct.error:
            raise GgufError("the file ends inside its header (truncated?)") from None
        self.pos += struct.calcsize(fmt)
        return values[0]

    def size(self) -> int:
        return self.unpack(self.size_format)

    def string(self) -> str:
        raw = self.raw_string()
        return raw.decode("utf-8", errors="surrogateescape")

    def raw_string(self) -> bytes:
        length = self.size()
        end = self.pos + length
        if end > len(self.buffer):
            raise GgufError("a string runs past the end of the file (truncated?)")
        raw = bytes(self.buffer[self.pos : end])
        self.pos = end
        return raw

    def value(self, type_: ValueType) -> Any:
        if type_ == ValueType.STRING:
            return self.string()
        return self.unpack("<" + _SCALAR_FORMAT[type_])

    def field(self, key: str) -> Field:
        type_ = _value_type(self.unpack("<I"), key)
        if type_ != ValueType.ARRAY:
            return Field(key, type_, self.value(type_))
        item_type = _value_type(self.unpack("<I"), key)
        if item_type == ValueType.ARRAY:
            raise GgufError(f"metadata key '{key}' is an array of arrays, which GGUF models do not use")
        count = self.size()
        if item_type == ValueType.STRING:
            return Field(key, type_, [self.string() for _ in range(count)], item_type)
        return Field(key, type_, self.numbers(key, item_type, count), item_type)

    def numbers(self, key: str, item_type: ValueType, count: int) -> array:
        items = array(_ARRAY_TYPECODE[item_type])
        end = self.pos + count * items.itemsize
        if end > len(self.buffer):
            raise GgufError(f"the array '{key}' runs past the end of the file (truncated?)")
        items.frombytes(self.buffer[self.pos : end])
        if sys.byteorder == "big":
            items.byteswap()
        self.pos = end
        return items


def _array_typecode(fmt: str) -> str:
    """The ``array`` typecode holding one ``fmt`` value (a bool is a byte: 0 or 1)."""
    code = "B" if fmt == "?" else fmt
    # array's 'I'/'i' sizes are the C compiler's: 4 bytes on every platform CPython builds
    # for, but a mismatch would misread every array, so it is checked once here.
    assert array(code).itemsize == struct.calcsize("<" + fmt), f"array typecode '{code}' has another size here"
    return code


_ARRAY_TYPECODE = {type_: _array_typecode(fmt) for type_, fmt in _SCALAR_FORMAT.items()}


def _value_type(code: int, key: str) -> ValueType:
    try:
        return ValueType(code)
    except ValueError:
        raise GgufError(f"metadata key '{key}' has unknown value type {code}") from None


def read_gguf(path: str | Path) -> GgufFile:
    """The header of a GGUF file; raises :class:`GgufError` when it is not one."""
    with open(path, "rb") as file:
        if file.read(4) != MAGIC:
            raise GgufError(f"{path} is not a GGUF file (no 'GGUF' magic)")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
            try:
                return _parse(memoryview(buffer), path)
            except struct.error:
                raise GgufError(f"{path}: the file ends inside its header (truncated?)") from None


def _parse(buffer: memoryview, path: str | Path) -> GgufFile:
    try:
        version = struct.unpack_from("<I", buffer, 4)[0]
        if version not in (1, 2, 3):
            byte_swapped = struct.unpack_from(">I", buffer, 4)[0]
            hint = " (a big-endian file)" if byte_swapped in (2, 3) else ""
            raise GgufError(f"{path}: unsupported GGUF version {version}{hint}")
        cursor = _Cursor(buffer, version)
        cursor.pos = 8
        try:
            fields, tensors = _tables(cursor)
            alignment = _alignment(fields.get("general.alignment"))
        except GgufError as exc:
            raise GgufError(f"{path}: {exc}") from None
        return GgufFile(version, fields, tensors, _align(cursor.pos, alignment))
    finally:
        buffer.release()


def _tables(cursor: _Cursor) -> tuple[dict[str, Field], list[TensorInfo]]:
    n_tensors, n_kv = cursor.size(), cursor.size()
    fields: dict[str, Field] = {}
    for _ in range(n_kv):
        key = cursor.string()
        fields[key] = cursor.field(key)
    tensors = []
    for _ in range(n_tensors):
        name = cursor.string()
        n_dims = cursor.unpack("<I")
        dims = tuple(cursor.size() for _ in range(n_dims))
        tensors.append(TensorInfo(name, dims, cursor.unpack("<I"), cursor.unpack("<Q")))
    return fields, tensors


_INTEGER_TYPES = frozenset(
    {ValueType.UINT8, ValueType.INT8, ValueType.UINT16, ValueType.INT16, ValueType.UINT32, ValueType.INT32,
     ValueType.UINT64, ValueType.INT64}
)  # fmt: skip


def _alignment(field: Field | None) -> int:
    """``general.alignment`` as ggml requires it: an integer, a positive power of two."""
    if field is None:
        return DEFAULT_ALIGNMENT
    if field.type not in _INTEGER_TYPES:
        raise GgufError(f"metadata key 'general.alignment' is a {field.type.name.lower()}, not an integer")
    value = int(field.value)
    if value <= 0 or value & (value - 1):
        raise GgufError(f"metadata key 'general.alignment' is {value}, not a positive power of two")
    return value


def _align(offset: int, alignment: int) -> int:
    return offset + (-offset % alignment)


# -- writing ---------------------------------------------------------------------------


class TensorData(msgspec.Struct, frozen=True):
    """A tensor to write: its info (offset ignored) and where its bytes come from."""

    info: TensorInfo
    source: Path
    source_offset: int  # absolute offset in ``source``


def write_gguf(path: Path, fields: Iterable[Field], tensors: list[TensorData], *, version: int = 2) -> None:
    """A GGUF file (version 2 or 3: the same little-endian layout) with ``fields`` and
    the tensors copied from their sources, each aligned to ``general.alignment``."""
    if version not in (2, 3):
        raise ValueError("only GGUF versions 2 and 3 are written")
    fields = list(fields)
    alignment = next((int(f.value) for f in fields if f.key == "general.alignment"), DEFAULT_ALIGNMENT)
    offsets, position = [], 0
    for tensor in tensors:
        offsets.append(position)
        position = _align(position + tensor.info.nbytes, alignment)
    with open(path, "wb") as out:
        out.write(MAGIC + struct.pack("<IQQ", version, len(tensors), len(fields)))
        for field in fields:
            _write_field(out, field)
        for tensor, offset in zip(tensors, offsets, strict=True):
            info = tensor.info
            _write_string(out, info.name.encode())
            out.write(struct.pack("<I", len(info.dims)) + b"".join(struct.pack("<Q", d) for d in info.dims))
            out.write(struct.pack("<IQ", info.type, offset))
        _pad(out, alignment)
        for tensor in tensors:
            _copy(out, tensor.source, tensor.source_offset, tensor.info.nbytes)
            _pad(out, alignment)


def _write_field(out: BinaryIO, field: Field) -> None:
    _write_string(out, field.key.encode())
    out.write(struct.pack("<I", field.type))
    if field.type != ValueType.ARRAY:
        _write_value(out, field.type, field.value)
        return
    assert field.item_type is not None, f"array field '{field.key}' needs an item_type"
    out.write(struct.pack("<IQ", field.item_type, len(field.value)))
    if field.item_type == ValueType.STRING:
        for item in field.value:
            _write_value(out, ValueType.STRING, item)
    elif isinstance(field.value, array) and field.value.typecode == _ARRAY_TYPECODE[field.item_type]:
        out.write(field.value.tobytes() if sys.byteorder == "little" else _swapped(field.value).tobytes())
    else:
        out.write(struct.pack(f"<{len(field.value)}{_SCALAR_FORMAT[field.item_type]}", *field.value))


def _swapped(items: array) -> array:
    copy = array(items.typecode, items)
    copy.byteswap()
    return copy


def _write_value(out: BinaryIO, type_: ValueType, value: Any) -> None:
    if type_ == ValueType.STRING:
        _write_string(out, value if isinstance(value, bytes) else value.encode("utf-8", errors="surrogateescape"))
    else:
        out.write(struct.pack("<" + _SCALAR_FORMAT[type_], value))


def _write_string(out: BinaryIO, raw: bytes) -> None:
    out.write(struct.pack("<Q", len(raw)) + raw)


def _pad(out: BinaryIO, alignment: int) -> None:
    out.write(b"\0" * (-out.tell() % alignment))


def _copy(out: BinaryIO, source: Path, offset: int, size: int) -> None:
    with open(source, "rb") as file:
        file.seek(offset)
        while size > 0:
            chunk = file.read(min(size, 1 << 22))
            if not chunk:
                raise GgufError(f"{source} ends before its tensor data does (truncated?)")
            out.write(chunk)
            size -= len(chunk)
