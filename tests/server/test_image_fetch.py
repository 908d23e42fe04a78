"""Remote image URLs: refused by default; when enabled, fetched only for a request that
can use them, from a checked public address, under one deadline and a decoded-size cap
(issue 9, rows 6–8)."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import time
import zlib
from collections.abc import Iterator

import httpx
import pytest

from dragoman.proxy import image_fetch
from dragoman.proxy.bounded_decode import TooLarge, UnsupportedEncoding, decode_body
from dragoman.proxy.public_address import refusal
from tests.support.image_host import PNG, ImageHost, bomb, image_host, make_certificate
from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def images() -> Iterator[ImageHost]:
    for encoding in ("zstd", "gzip", "deflate", "br"):
        bomb(encoding)  # made before the clock of any fetch starts
    with image_host() as host:
        yield host


def ask(server: RunningServer, *urls: str, model: str = "scripted") -> httpx.Response:
    content = [{"type": "text", "text": "what is this?"}]
    content += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": content}]},
        timeout=30,
    )


def scripted_with(image_fetch: str) -> str:
    return (
        f"server:\n  image_fetch: {image_fetch}\nmodels:\n"
        "  - {name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}\n"
        "  - {name: blind, backend: 'tests.support.scripted:ScriptedBackend', vision: false}\n"
    )


@pytest.fixture(scope="module")
def fetching() -> Iterator[RunningServer]:
    """Fetching on; the loopback image host is listed (listed hosts may be private)."""
    settings = "{enabled: true, allowed_hosts: [127.0.0.1, images.invalid], max_bytes: 1048576, timeout: 1, max_concurrent: 3}"
    with serve(config_from_yaml(scripted_with(settings))) as server:
        yield server


def error(response: httpx.Response) -> str:
    return response.json()["error"]["message"]


def test_off_by_default(scripted_server: RunningServer, images: ImageHost) -> None:
    r = ask(scripted_server, images.url + "/dot.png")
    assert r.status_code == 400
    assert "remote image URLs are not fetched" in error(r)


def test_enabled_refuses_loopback_unless_listed(images: ImageHost) -> None:
    with serve(config_from_yaml(scripted_with("{enabled: true}"))) as server:
        r = ask(server, images.url + "/dot.png")
    assert r.status_code == 400
    assert "non-public address (127.0.0.1: a private or special-purpose IPv4 address)" in error(r)


def test_listed_host_is_fetched_with_limits(fetching: RunningServer, images: ImageHost) -> None:
    assert ask(fetching, images.url + "/dot.png").status_code == 200
    image = ScriptedBackend.last_request.messages[0].images[0]
    assert (image.data, image.mime_type) == (PNG, "image/png")
    too_big = ask(fetching, images.url + "/big.png?x=" + "1" * 10)
    assert too_big.status_code == 200  # 67 KB < 1 MiB
    not_image = ask(fetching, images.url + "/page.html")
    assert "not a PNG" in error(not_image)
    other = ask(fetching, "http://localhost:9/x.png")
    assert "not in server.image_fetch.allowed_hosts" in error(other)


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "deflate", "br"])
def test_a_decompression_bomb_stops_at_max_bytes(fetching: RunningServer, images: ImageHost, encoding: str) -> None:
    # row 6: a zstd frame of 1 GiB of zeros cost 2.2 GB and blocked the loop 28 s
    started = time.monotonic()
    r = ask(fetching, images.url + f"/bomb-{encoding}")
    assert r.status_code == 400, r.text
    assert error(r).endswith("larger than 1048576 bytes (server.image_fetch.max_bytes)")
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_a_compressed_image_is_decoded(fetching: RunningServer, images: ImageHost, encoding: str) -> None:
    assert ask(fetching, images.url + f"/png-{encoding}").status_code == 200
    assert ScriptedBackend.last_request.messages[0].images[0].data == PNG


def test_one_deadline_for_the_whole_fetch(fetching: RunningServer, images: ImageHost) -> None:
    # row 8: a byte every 2 s held a fetch 40 s with timeout 3 (the timeout was per read)
    started = time.monotonic()
    r = ask(fetching, images.url + "/drip")
    assert r.status_code == 400 and "not fetched within 1s (server.image_fetch.timeout)" in error(r)
    assert time.monotonic() - started < 2.5


def test_image_parts_are_counted_before_any_fetch(fetching: RunningServer, images: ImageHost) -> None:
    # row 8: 200 image_url parts started 200 fetches before the 16-image limit was checked
    before = images.hits
    r = ask(fetching, *[images.url + f"/slow.png?{i}" for i in range(200)])
    assert r.status_code == 400
    assert error(r) == "messages: 200 images in one request; the limit is 16 (server.limits.max_images)"
    assert images.hits == before


@pytest.mark.parametrize(("model", "status", "says"), [
    ("nobody", 404, "model 'nobody' not found"), ("blind", 400, "model 'blind' does not support images"),
])
def test_nothing_is_fetched_for_a_model_that_cannot_take_images(
    fetching: RunningServer, images: ImageHost, model: str, status: int, says: str
) -> None:
    before = images.hits
    r = ask(fetching, images.url + "/dot.png", model=model)
    assert (r.status_code, error(r)) == (status, says)
    assert images.hits == before


def test_fetches_of_one_request_run_a_few_at_a_time(fetching: RunningServer, images: ImageHost) -> None:
    images.peak = 0
    r = ask(fetching, *[images.url + f"/slow.png?{i}" for i in range(9)])
    assert r.status_code == 200
    assert images.peak == 3  # max_concurrent


def test_the_checked_address_is_the_one_connected_to(
    fetching: RunningServer, images: ImageHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """row 7: a name answered a public address when checked and 127.0.0.1 when the
    client resolved it again. Now it is resolved once and that address is dialled:
    ``images.invalid`` resolves nowhere but in this resolver, so any second lookup fails."""
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    monkeypatch.setattr(image_fetch, "resolve", resolver)
    port = images.url.rsplit(":", 1)[1]
    before = len(images.hosts)
    r = ask(fetching, f"http://images.invalid:{port}/dot.png")
    assert r.status_code == 200, r.text
    assert asked == ["images.invalid"]
    assert images.hosts[before:] == [f"images.invalid:{port}"]  # the name kept for Host


def test_every_resolved_address_is_checked(images: ImageHost, monkeypatch: pytest.MonkeyPatch) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["8.8.8.8", "::ffff:127.0.0.1"]  # nothing is dialled: the second one refuses it all

    monkeypatch.setattr(image_fetch, "resolve", resolver)
    with serve(config_from_yaml(scripted_with("{enabled: true}"))) as server:
        r = ask(server, "http://rebind.invalid/x.png")
    assert r.status_code == 400
    assert "non-public address (::ffff:7f00:1: it carries 127.0.0.1, which is a private" in error(r)


ADDRESSES = [
    # (address, refused?) — the first six pass Python 3.11's is_global or embed a private address
    ("192.0.0.192", True), ("64:ff9b::a9fe:a9fe", True), ("2002:a9fe:a9fe::", True), ("::127.0.0.1", True),
    ("::ffff:127.0.0.1", True), ("::ffff:0:a9fe:a9fe", True),
    ("127.0.0.1", True), ("10.1.2.3", True), ("172.16.0.1", True), ("192.168.1.1", True), ("169.254.169.254", True),
    ("100.64.0.1", True), ("0.0.0.0", True), ("255.255.255.255", True), ("224.0.0.1", True), ("198.18.0.1", True),
    ("192.88.99.1", True), ("203.0.113.5", True), ("::", True), ("::1", True), ("fe80::1", True), ("fd00::1", True),
    ("ff02::1", True), ("2001:db8::1", True), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", True), ("64:ff9b:1::1", True),
    ("8.8.8.8", False), ("1.1.1.1", False), ("2606:4700:4700::1111", False), ("::ffff:8.8.8.8", False),
    ("2002:808:808::1", False),
]


@pytest.mark.parametrize(("address", "refused"), ADDRESSES, ids=[a for a, _ in ADDRESSES])
def test_address_policy(address: str, refused: bool) -> None:
    assert (refusal(ipaddress.ip_address(address)) is not None) == refused


DECODES = [
    # (name, body, Content-Encoding, limit, decoded or the error)
    ("identity", b"abc", "", 10, b"abc"),
    ("identity too large", b"abcdef", "identity", 5, TooLarge),
    ("gzip", zlib.compress(b"x" * 100, wbits=31), "gzip", 100, b"x" * 100),
    ("gzip one byte over", zlib.compress(b"x" * 101, wbits=31), "gzip", 100, TooLarge),
    ("deflate (zlib)", zlib.compress(b"y" * 50), "deflate", 100, b"y" * 50),
    ("deflate (raw)", zlib.compress(b"y" * 50, wbits=-15), "deflate", 100, b"y" * 50),
    ("two layers", zlib.compress(zlib.compress(b"z" * 10, wbits=31)), "gzip, deflate", 100, b"z" * 10),
    ("unknown", b"abc", "compress", 100, UnsupportedEncoding),
    ("not gzip", b"abc", "gzip", 100, ValueError),
]


@pytest.mark.parametrize(("name", "body", "encoding", "limit", "want"), DECODES, ids=[d[0] for d in DECODES])
def test_bounded_decode(name: str, body: bytes, encoding: str, limit: int, want: bytes | type[Exception]) -> None:
    if isinstance(want, bytes):
        assert decode_body(body, encoding, limit) == want
    else:
        with pytest.raises(want):
            decode_body(body, encoding, limit)


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "deflate", "br"])
def test_bounded_decode_of_a_bomb_stops_at_the_limit(encoding: str) -> None:
    with pytest.raises(TooLarge):
        decode_body(bomb(encoding), encoding, MiB)


@pytest.fixture(scope="module")
def tls_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ImageHost, ssl.SSLContext]]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is not installed here, so no test certificate can be made")
    ca, cert, key = make_certificate(tmp_path_factory.mktemp("tls"), "images.invalid")
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    with image_host(tls=server_side) as host:
        yield host, ssl.create_default_context(cafile=str(ca))


def test_tls_to_the_checked_address_verifies_the_name(
    fetching: RunningServer, tls_images: tuple[ImageHost, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection goes to the address, TLS to the name: SNI and the certificate check
    use ``images.invalid``, so its certificate passes and the same server named otherwise fails."""
    host, trust = tls_images

    async def resolver(name: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    monkeypatch.setattr(image_fetch, "resolve", resolver)
    monkeypatch.setattr(image_fetch, "verify", trust)
    port = host.url.rsplit(":", 1)[1]
    r = ask(fetching, f"https://images.invalid:{port}/dot.png")
    assert r.status_code == 200, r.text
    assert host.hosts[-1] == f"images.invalid:{port}"
    wrong = ask(fetching, f"https://127.0.0.1:{port}/dot.png")  # listed, but the certificate names images.invalid
    assert wrong.status_code == 400 and "CERTIFICATE_VERIFY_FAILED" in error(wrong)


def test_anthropic_and_responses_url_images_follow_the_same_rules(fetching: RunningServer, images: ImageHost) -> None:
    url = images.url + "/dot.png"
    source = {"type": "image", "source": {"type": "url", "url": url}}
    r = httpx.post(fetching.url + "/v1/messages", json={
        "model": "scripted", "max_tokens": 8, "messages": [{"role": "user", "content": [source, {"type": "text", "text": "?"}]}],
    }, timeout=30)  # fmt: skip
    assert r.status_code == 200, r.text
    assert ScriptedBackend.last_request.messages[0].images[0].data == PNG
    part = {"type": "input_image", "image_url": url}
    r = httpx.post(fetching.url + "/v1/responses", json={
        "model": "scripted", "input": [{"role": "user", "content": [part, {"type": "input_text", "text": "?"}]}],
    }, timeout=30)  # fmt: skip
    assert r.status_code == 200, r.text
    assert ScriptedBackend.last_request.messages[0].images[0].data == PNG
    # checked before any fetch: a model without vision is refused in the caller's dialect
    blind = httpx.post(fetching.url + "/v1/messages", json={
        "model": "blind", "max_tokens": 8, "messages": [{"role": "user", "content": [source]}],
    }, timeout=30)  # fmt: skip
    assert blind.status_code == 400 and blind.json()["error"]["message"] == "model 'blind' does not support images"
