"""A test-only image server on 127.0.0.1 that misbehaves on demand: decompression
bombs of each ``Content-Encoding``, a byte-a-second drip, slow replies that show how
many fetches run at once, and a record of the ``Host`` each request named."""

from __future__ import annotations

import base64
import http.server
import ssl
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tests.support.stand_ins import reset_between_tests

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
MiB = 1024 * 1024
BOMB_SIZE = 1024 * MiB  # what each bomb decodes to


def zstd_zeros(total: int) -> bytes:
    """A zstd frame of ``total`` zero bytes in RLE blocks (4 bytes per 128 KiB), built by
    hand so that no zstd library is needed to make one: 1 GiB is 32 KiB on the wire."""
    block = 128 * 1024
    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # magic; no content size; window 2^17
    count = total // block
    for i in range(count):
        header = (1 if i == count - 1 else 0) | (1 << 1) | (block << 3)  # last?, RLE, size
        out += header.to_bytes(3, "little") + b"\x00"
    return bytes(out)


def _zlib_zeros(total: int, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(MiB)
    return b"".join(packer.compress(zeros) for _ in range(total // MiB)) + packer.flush()


@cache
def bomb(encoding: str) -> bytes:
    if encoding == "zstd":
        return zstd_zeros(BOMB_SIZE)
    if encoding == "gzip":
        return _zlib_zeros(BOMB_SIZE // 4, 31)  # 256 MiB: gzip of zeros is ~1/1000, slow to make
    if encoding == "deflate":
        return _zlib_zeros(BOMB_SIZE // 4, 15)
    if encoding == "br":
        import brotli

        packer = brotli.Compressor(quality=1)
        zeros = bytes(MiB)
        return b"".join(packer.process(zeros) for _ in range(BOMB_SIZE // 4 // MiB)) + packer.finish()
    raise ValueError(encoding)


def compressed_png(encoding: str) -> bytes:
    if encoding == "gzip":
        return zlib.compress(PNG, wbits=31)
    if encoding == "zstd":
        import zstandard

        return zstandard.compress(PNG)
    raise ValueError(encoding)


def make_certificate(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate for ``name`` signed by it, made with the
    ``openssl`` CLI: (CA certificate, certificate, key)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "leaf.key", "leaf.csr", "leaf.pem"))
    extensions = folder / "leaf.ext"
    extensions.write_text(f"subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\n")
    for command in (
        ["req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=dragoman test CA"],
        ["req", *ec, "-keyout", key, "-out", csr, "-subj", f"/CN={name}"],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2",
         "-extfile", extensions],
    ):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True, timeout=30)
    return ca, cert, key


@dataclass
class ImageHost:
    url: str = ""
    hits: int = 0
    hosts: list[str] = field(default_factory=list)  # the Host header of each request
    running: int = 0
    peak: int = 0  # most /slow.png requests in flight at once
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        """Before each test (tests/support/stand_ins.py); requests still in flight stay counted."""
        with self.lock:
            self.hits, self.hosts, self.peak = 0, [], self.running


def _handler(state: ImageHost) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's spelling
            path = self.path.split("?", 1)[0]
            slow = path == "/slow.png"
            with state.lock:
                state.hits += 1
                state.hosts.append(self.headers.get("Host", ""))
                state.running += slow
                state.peak = max(state.peak, state.running)
            try:
                self._answer(path)
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                with state.lock:
                    state.running -= slow

        def _answer(self, path: str) -> None:
            if path.startswith("/bomb-"):
                encoding = path.removeprefix("/bomb-")
                return self._send(bomb(encoding), {"Content-Encoding": encoding, "Content-Type": "image/png"})
            if path.startswith("/png-"):
                encoding = path.removeprefix("/png-")
                return self._send(compressed_png(encoding), {"Content-Encoding": encoding})
            if path == "/drip":  # a byte every 0.3 s, for ever
                self.send_response(200)
                self.send_header("Content-Length", str(MiB))
                self.end_headers()
                for _ in range(1000):
                    self.wfile.write(b"\x89")
                    self.wfile.flush()
                    time.sleep(0.3)
                return None
            if path == "/slow.png":
                time.sleep(0.3)
                return self._send(PNG)
            if path == "/dot.png":
                return self._send(PNG)
            if path == "/big.png":
                return self._send(PNG * 1000)
            return self._send(b"not an image")

        def _send(self, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    return Handler


@contextmanager
def image_host(tls: ssl.SSLContext | None = None) -> Iterator[ImageHost]:
    """Plain HTTP, or HTTPS with ``tls`` (a server context holding the certificate)."""
    state = ImageHost()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    try:
        with reset_between_tests(state):
            yield state
    finally:
        server.shutdown()
        server.server_close()
