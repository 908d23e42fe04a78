"""Builds that ``/api/pull`` starts: one per source however many pulls ask (the others
follow it), one at a time (another source waits in line, and across processes for
``<home>/build.lock``), none when ``server.pull_builds`` is false, and a crashed build
reported as one clean line (its traceback goes to the server log). Real server on
127.0.0.1, real build processes, a real tiny model from a stand-in Ollama store."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from dragoman.backends.onnx.prepare.build_lock import build_lock
from tests.prepare.test_sources import gguf_file
from tests.prepare.tiny_models import make_tiny
from tests.support.ollama_store import Store
from tests.support.server import RunningServer, config_from_yaml, serve


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.levelno, record.getMessage()))


@pytest.fixture
def build_log() -> Iterator[Records]:
    logger = logging.getLogger("dragoman.onnx.prepare")
    records, level = Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(records)
    logger.setLevel(level)


@pytest.fixture(scope="module")
def dragoman_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def server(dragoman_home: Path, store: Store) -> Iterator[RunningServer]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAGOMAN_HOME", str(dragoman_home))
        with serve(config_from_yaml("models: []\n")) as running:
            yield running


def pull(server: RunningServer, name: str) -> list[dict]:
    reply = httpx.post(f"{server.url}/api/pull", json={"model": name}, timeout=600)
    assert reply.status_code == 200, reply.text
    return [json.loads(line) for line in reply.text.splitlines()]


class BuildProcesses:
    """The build processes (``python -m dragoman.backends.onnx.prepare SOURCE``) this test
    process starts, by pid, sampled while it runs."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for child in psutil.Process().children(recursive=True):
                try:
                    command = child.cmdline()
                except psutil.Error:
                    continue
                if "dragoman.backends.onnx.prepare" in command and self.source in command:
                    self.pids.add(child.pid)

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join()
        return self.pids


def started(log: Records, source: str) -> list[float]:
    return [at for at, _, text in log.lines if text.startswith(f"build of {source} started")]


def ended(log: Records, source: str) -> list[float]:
    return [at for at, _, text in log.lines if text.startswith(f"build of {source} ended")]


def test_three_pulls_share_one_build_and_another_source_waits(
    server: RunningServer, store: Store, tmp_path: Path, build_log: Records
) -> None:
    store.add_model("tiny-qwen2", "latest", make_tiny("qwen2", tmp_path).gguf, template="{{ .Prompt }}")
    store.add_model("other", "latest", gguf_file(tmp_path / "other.gguf", arch="mamba"))
    results: dict[str, list[dict]] = {}

    def run(key: str, name: str) -> None:
        results[key] = pull(server, name)

    threads = [threading.Thread(target=run, args=(f"same-{i}", "ollama:tiny-qwen2")) for i in range(3)]
    threads.append(threading.Thread(target=run, args=("other", "ollama:other")))
    processes = BuildProcesses("ollama:tiny-qwen2")
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(timeout=600)
    assert len(processes.stop()) == 1  # one build process for three pulls
    for i in range(3):
        lines = results[f"same-{i}"]
        assert lines[-1] == {"status": "success"}
        assert "built tiny-qwen2-latest-int4-cpu; to serve it" in lines[-2]["status"]
        assert [x["completed"] for x in lines if x.get("total") == 4][-1] == 4
    joined = [k for k, lines in results.items() if any(x.get("status", "").startswith("joining the build of") for x in lines)]
    assert sorted(joined) == ["same-1", "same-2"]
    # The other source waited in line, and its build started once the first had ended.
    other = results["other"]
    assert any(x.get("status", "").startswith("waiting: the build of ollama:tiny-qwen2 runs first") for x in other)
    assert "architecture 'mamba' is not supported" in other[-1]["error"]
    assert started(build_log, "ollama:other")[0] >= ended(build_log, "ollama:tiny-qwen2")[0]


def test_a_build_waits_for_another_process_and_a_crash_is_one_clean_line(
    server: RunningServer, store: Store, dragoman_home: Path, tmp_path: Path, build_log: Records
) -> None:
    # A GGUF with no vocabulary passes the checks made before work and crashes the builder.
    store.add_model("crashy", "latest", gguf_file(tmp_path / "crashy.gguf"))
    lines: list[dict] = []
    with build_lock(dragoman_home, "a build held by the test", lambda _: None):
        puller = threading.Thread(target=lambda: lines.extend(pull(server, "ollama:crashy")))
        puller.start()
        time.sleep(3)
        assert puller.is_alive()  # waiting for the lock this process holds
    puller.join(timeout=600)
    waiting = [x["status"] for x in lines if x.get("status", "").startswith("waiting: another process is building")]
    assert waiting and "a build held by the test" in waiting[0]
    error = lines[-1]["error"]
    assert error.startswith("pull of 'ollama:crashy' failed: the build's worker stopped with an internal error (exit status")
    assert "\n" not in error and "Traceback" not in error and 'File "' not in error and "KeyError" not in error
    logged = "\n".join(text for _, level, text in build_log.lines if level >= logging.ERROR)
    assert "Traceback" in logged  # the details are in the server log


def test_pull_builds_false_refuses_a_build_with_a_403(store: Store, tmp_path: Path) -> None:
    store.add_model("refused", "latest", gguf_file(tmp_path / "m.gguf"))
    with serve(config_from_yaml("server: {pull_builds: false}\nmodels: []\n")) as off:
        reply = httpx.post(f"{off.url}/api/pull", json={"model": "ollama:refused"})
        assert reply.status_code == 403
        assert "server.pull_builds: false" in reply.json()["error"] and "dragoman models prepare ollama:refused" in reply.json()["error"]
        assert httpx.post(f"{off.url}/api/pull", json={"model": "ollama:absent"}).status_code == 404
