"""Which engine runs a local model, and why when it is the Generator, said the same way
by `dragoman serve` (run as a user runs it) on its terminal, in /api/ps, /health/ready
and /metrics. A model that fell back from the batch engine used to say so only in a
worker log line the server never printed.

The default entry gets whichever engine this CPU allows (the batch engine refuses a
model whose batched logits it cannot trust), so for it the test checks that every
surface says what the serve output said the worker reported; the forced entry
(``engine: generator``) must say generator, and why."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import ollama
import pytest

from dragoman.proxy.health_routes import READY_CACHE_SECONDS
from tests.support.serve_process import Served, dragoman_serve

AUTO = "engine-auto"
FORCED = "engine-forced"
CONFIGURED = "engine: generator in the config"
LOADED = re.compile(r"^dragoman: model '(?P<model>[^']+)' loaded on (?P<provider>\w+) \(.*?\) in [\d.]+ s; "
                    r"(?P<engine>batch|generator) engine(?:, because (?P<reason>.+))?$")  # fmt: skip


class Said(msgspec.Struct, frozen=True):
    engine: str
    reason: str


@pytest.fixture(scope="module")
def served(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    config = tmp_path_factory.mktemp("engines") / "engines.yaml"
    config.write_text(
        "models:\n"
        f"  - {{name: {AUTO}, backend: onnx, path: '{model_dir}', provider: cpu, context_length: 1024}}\n"
        f"  - {{name: {FORCED}, backend: onnx, path: '{model_dir}', provider: cpu, context_length: 1024, engine: generator}}\n"
    )
    with dragoman_serve(config) as served:
        yield served


def load(served: Served, model: str) -> Said:
    """Run one short chat (which loads the model) with the official client; what the
    serve output said about the load."""
    client = ollama.Client(host=served.url, timeout=120)
    client.chat(model=model, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2, "temperature": 0})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        said = [m for line in list(served.lines) if (m := LOADED.match(line)) and m["model"] == model]
        if said:
            assert len(said) == 1, said  # loaded once, said once
            return Said(said[0]["engine"], said[0]["reason"] or "")
        time.sleep(0.05)
    raise AssertionError(f"the serve output says nothing of loading {model}:\n" + "\n".join(served.lines))


def surfaces(served: Served, model: str) -> dict[str, Said]:
    """What /api/ps, /health/ready and /metrics say runs ``model``."""
    ps = next(m for m in httpx.get(served.url + "/api/ps").json()["models"] if m["name"] == model)
    details = ps["details"]
    # /health/ready reuses its checks for READY_CACHE_SECONDS (3 s), so a load shows
    # there at most that long after it happened
    deadline = time.monotonic() + READY_CACHE_SECONDS + 2
    while True:
        ready = httpx.get(served.url + "/health/ready").json()
        detail = next(c["detail"] for c in ready["checks"] if c["name"] == f"model:{model}")
        said = re.fullmatch(r"loaded; (batch|generator) engine(?:, because (.+))?", detail)
        if said or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert said, detail
    metrics = httpx.get(served.url + "/metrics").text
    series = re.findall(rf'^dragoman_model_engine{{engine="(\w+)",model="{model}",reason="(.*)"}} 1\.0$', metrics, re.M)
    assert len(series) == 1, metrics
    return {
        "/api/ps": Said(details["engine"], details["engine_reason"]),
        "/health/ready": Said(said[1], said[2] or ""),
        "/metrics": Said(*series[0]),
    }


def test_a_forced_generator_says_generator_and_why_everywhere(served: Served) -> None:
    said = load(served, FORCED)
    assert said == Said("generator", CONFIGURED)
    assert surfaces(served, FORCED) == {"/api/ps": said, "/health/ready": said, "/metrics": said}
    # the config's own choice is no fall back: no warning
    assert not any("fell back" in line and FORCED in line for line in served.lines)
    # the extra details fields are ones Ollama's own client reads past
    running = {m.model: m for m in ollama.Client(host=served.url).ps().models}
    assert running[FORCED].details.family == "llama"


def test_the_default_entry_says_one_engine_everywhere(served: Served) -> None:
    """Batch or Generator, as this CPU allows; every surface says what the worker
    reported, with a reason exactly when it is the Generator, and a fall back is a
    warning in the server's log."""
    said = load(served, AUTO)
    assert (said.engine == "generator") == bool(said.reason), said
    assert surfaces(served, AUTO) == {"/api/ps": said, "/health/ready": said, "/metrics": said}
    warned = [line for line in served.lines if "fell back to the generator engine" in line and AUTO in line]
    if said.engine == "generator":
        assert said.reason.startswith("the batch engine refused the model: "), said
        warned_json = [msgspec.json.decode(line) for line in warned]
        assert [(w["level"], w["reason"]) for w in warned_json] == [("warning", said.reason)]
    else:
        assert warned == []
