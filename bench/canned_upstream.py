"""A minimal OpenAI-compatible upstream for benchmarks: the same canned reply to every
``POST /v1/chat/completions``, as JSON or as an SSE stream of ``--chunks`` content
chunks (plus the finish and usage chunks and ``[DONE]``), written back to back.

Raw asyncio protocol (uvloop when installed), HTTP/1.1 keep-alive: as close to free as
a Python server gets, so the benchmark measures what sits in front of it.

    python bench/canned_upstream.py --port 8101 --chunks 100 [--gap-ms 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

MODEL = "bench"


def completion_body() -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello! How can I help you today?"},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 10, "total_tokens": 19},
        },
        separators=(",", ":"),
    ).encode()


def stream_frames(chunks: int) -> list[bytes]:
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": int(time.time()), "model": MODEL}

    def frame(choices: list[dict], **extra: object) -> bytes:
        return b"data: " + json.dumps({**head, "choices": choices, **extra}, separators=(",", ":")).encode() + b"\n\n"

    def choice(delta: dict, finish: str | None = None) -> list[dict]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

    frames = [frame(choice({"role": "assistant", "content": ""}))]
    frames += [frame(choice({"content": f" tok{i}"})) for i in range(chunks)]
    frames += [frame(choice({}, "stop")), frame([], usage={"prompt_tokens": 9, "completion_tokens": chunks,
                                                         "total_tokens": 9 + chunks})]
    return frames + [b"data: [DONE]\n\n"]


def responses(chunks: int) -> tuple[bytes, list[bytes]]:
    """The whole reply, and the pieces of the streamed one (head, chunks, terminator)."""
    body = completion_body()
    whole = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    pieces = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
    pieces += [b"%x\r\n%s\r\n" % (len(f), f) for f in stream_frames(chunks)]
    return whole, pieces + [b"0\r\n\r\n"]


class CannedProtocol(asyncio.Protocol):
    whole = b""
    streamed = b""
    # With a gap, every chunk of a stream is its own write, ``gap`` seconds apart, so
    # no reader ever gets two at once (for measuring the cost of each chunk).
    gap = 0.0
    stream_pieces: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buffer[:end].lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line[15:])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            streaming = b'"stream":true' in body.replace(b" ", b"")
            if streaming and self.gap:
                asyncio.ensure_future(self._paced())
            else:
                self.transport.write(self.streamed if streaming else self.whole)  # type: ignore[attr-defined]

    async def _paced(self) -> None:
        for piece in self.stream_pieces:
            if self.transport.is_closing():  # type: ignore[attr-defined]
                return
            self.transport.write(piece)  # type: ignore[attr-defined]
            await asyncio.sleep(self.gap)


async def serve(port: int, chunks: int, gap: float) -> None:
    CannedProtocol.whole, CannedProtocol.stream_pieces = responses(chunks)
    CannedProtocol.streamed = b"".join(CannedProtocol.stream_pieces)
    CannedProtocol.gap = gap
    loop = asyncio.get_running_loop()
    server = await loop.create_server(CannedProtocol, "127.0.0.1", port, backlog=1024)
    print(f"canned upstream on http://127.0.0.1:{port}/v1 ({chunks} chunks a stream)", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--gap-ms", type=float, default=0.0, help="pause between stream chunks (default: none)")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.port, args.chunks, args.gap_ms / 1000))


if __name__ == "__main__":
    main()
