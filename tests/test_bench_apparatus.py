"""The cheap measurement apparatus of ``bench/proxy_workers.py`` (``bench/apparatus.py``):
nginx must answer exactly what ``canned_upstream.py`` answers, over keep-alive, and wrk's
summary must be read right. The real programs run where Debian's packages are installed;
elsewhere those tests skip and say what to install (the benchmark does not need them)."""

from __future__ import annotations

import http.client
import json
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import apparatus  # noqa: E402
from canned_upstream import completion_body  # noqa: E402

from tests.support.server import free_port  # noqa: E402

BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello."}]}).encode()


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ('{"a":"b"}', "'{\"a\":\"b\"}'"),
        ("it's", "'it\\'s'"),
        ("a\\b", "'a\\\\b'"),
    ],
)
def test_nginx_strings_are_quoted(text: str, quoted: str) -> None:
    assert apparatus._nginx_string(text) == quoted


def test_a_dollar_in_the_body_is_refused_not_changed() -> None:
    with pytest.raises(ValueError, match=r"literal '\$'"):
        apparatus.nginx_config(8080, b'{"price":"$5"}', Path("/tmp"), as_root=False)


def test_wrk_summary_is_read_as_loadgen_reports() -> None:
    out = ("Running 5s test @ http://127.0.0.1:1/v1/chat/completions\n  1 threads and 32 connections\n"
           'WRK-SUMMARY {"requests":20000,"duration_us":5000000,"connect":0,"read":0,"write":0,"status":3,'
           '"timeout":1,"p50_us":7000,"p99_us":12500}\n')  # fmt: skip
    assert apparatus.parse_wrk(out) == {"requests": 20000, "errors": 4, "first_error": "status: 3", "seconds": 5.0,
                                        "req_per_s": 4000.0, "p50_ms": 7.0, "p99_ms": 12.5}  # fmt: skip


def test_wrk_without_a_summary_says_so() -> None:
    with pytest.raises(RuntimeError, match="no summary"):
        apparatus.parse_wrk("Running 5s test\nRequests/sec: 1.0\n")


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def nginx() -> Iterator[tuple[int, bytes]]:
    if problem := apparatus.missing("nginx"):
        pytest.skip(problem)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dragoman-nginx-") as tmp:
        work = Path(tmp)
        canned = completion_body()
        process = apparatus.start_nginx(port, canned, work, work / "nginx.log")
        try:
            deadline = time.monotonic() + 20
            while not _listening(port):
                assert process.poll() is None and time.monotonic() < deadline, (work / "nginx-error.log").read_text()
                time.sleep(0.05)
            yield port, canned
        finally:
            process.terminate()
            process.wait(10)


def test_nginx_answers_the_canned_reply_over_one_keep_alive_connection(nginx: tuple[int, bytes]) -> None:
    port, canned = nginx
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for _ in range(3):  # the same connection every time: keep-alive, the request body read and dropped
        connection.request("POST", "/v1/chat/completions", BODY, {"content-type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("content-type") == "application/json"
        assert response.read() == canned  # byte for byte what canned_upstream.py sends
    connection.request("POST", "/v1/other", BODY)
    assert connection.getresponse().status == 404
    connection.close()


def test_wrk_drives_nginx_and_reports_what_it_counted(nginx: tuple[int, bytes], tmp_path: Path) -> None:
    if problem := apparatus.missing("wrk"):
        pytest.skip(problem)
    started: list[bool] = []
    result = apparatus.run_wrk(f"http://127.0.0.1:{nginx[0]}/v1/chat/completions", BODY, 4, 1, tmp_path,
                               measured=lambda: started.append(True))  # fmt: skip
    assert started == [True]
    assert result["errors"] == 0
    assert int(result["requests"]) > 100  # nginx answers thousands a second; 100 in one second is no answer at all
    assert 0.9 < float(result["seconds"]) < 2.5
    assert float(result["p50_ms"]) <= float(result["p99_ms"])


def test_wrk_counts_error_statuses(nginx: tuple[int, bytes], tmp_path: Path) -> None:
    if problem := apparatus.missing("wrk"):
        pytest.skip(problem)
    result = apparatus.run_wrk(f"http://127.0.0.1:{nginx[0]}/v1/missing", BODY, 2, 1, tmp_path)
    assert result["errors"] == result["requests"] > 0
    assert str(result["first_error"]).startswith("status: ")

