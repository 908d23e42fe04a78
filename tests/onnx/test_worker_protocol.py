"""Frames between the backend and its worker."""

from __future__ import annotations

import io

import pytest

from dragoman.adapters.canonical import TokenLogprob, TopLogprob
from dragoman.backends.text.segments import Segment
from dragoman.backends.onnx.worker_protocol import (
    HEADER,
    MAX_FRAME,
    Cancel,
    Done,
    Guidance,
    Processing,
    Ready,
    Refused,
    Search,
    Shutdown,
    Start,
    Tokens,
    decode_command,
    decode_report,
    encode_frame,
    read_frame,
)

COMMANDS = [
    Start(
        1,
        [Segment("<|im_start|>user\n"), Segment("<|im_start|>", special=False), Segment("hi")],
        2048,
        16,
        Search(do_sample=True, temperature=0.5),
        Processing(min_p=0.1),
        Guidance("json_schema", "{}"),
        ["\n"],
        True,
        3,
    ),
    Cancel(7),
    Shutdown(),
]
REPORTS = [
    Ready("cpu", "CPU", 8192, 123, [2]),
    Refused(1, "context", "too long", 900, 512),
    Tokens(1, [42], "Hi", [TokenLogprob("Hi", -0.1, [72, 105], [TopLogprob("Hi", -0.1, [72, 105])])]),
    Done(1, "length", 10, 16, 5, 6, "tail"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_commands_round_trip(command: object) -> None:
    frame = encode_frame(command)  # type: ignore[arg-type]
    assert decode_command(read_frame(io.BytesIO(frame))) == command  # type: ignore[arg-type]


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: type(r).__name__)
def test_reports_round_trip(report: object) -> None:
    frame = encode_frame(report)  # type: ignore[arg-type]
    assert decode_report(read_frame(io.BytesIO(frame))) == report  # type: ignore[arg-type]


def test_frames_follow_each_other_and_end_cleanly() -> None:
    stream = io.BytesIO(encode_frame(Cancel(1)) + encode_frame(Cancel(2)))
    assert [decode_command(read_frame(stream)) for _ in range(2)] == [Cancel(1), Cancel(2)]  # type: ignore[arg-type]
    assert read_frame(stream) is None


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("cut header", encode_frame(Cancel(1))[:2]),
        ("cut body", encode_frame(Cancel(1))[:-1]),
        ("oversized", HEADER.pack(MAX_FRAME + 1)),
    ],
)
def test_broken_frames_raise(name: str, data: bytes) -> None:
    with pytest.raises((EOFError, ValueError)):
        read_frame(io.BytesIO(data))
