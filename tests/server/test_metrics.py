"""Metrics recorded from request records: series looked up once, counted every time."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from dragoman.adapters.canonical import Usage
from dragoman.proxy.metrics import Metrics
from dragoman.proxy.record import RequestRecord


def record(path: str, status: int, *, entry: str | None = "m", ttft: bool = True, usage: bool = True) -> RequestRecord:
    r = RequestRecord("id", "POST", path)
    r.entry, r.status = entry, status
    if ttft:
        r.first_token_at = r.started + 0.01
    if usage:
        r.usage = Usage(prompt_tokens=5, completion_tokens=3)
    return r


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_each_request_counts_into_its_own_series() -> None:
    metrics = Metrics(lambda: iter(()))
    for r in [record("/v1/chat/completions", 200), record("/v1/chat/completions", 200), record("/api/chat", 200),
              record("/v1/chat/completions", 429, ttft=False, usage=False), record("/nope/1", 404, entry=None, ttft=False, usage=False),
              record("/nope/2", 404, entry=None, ttft=False, usage=False)]:  # fmt: skip
        metrics.observe(r, r.started + 0.05)
    got = samples(metrics)
    requests = {labels: v for (name, labels), v in got.items() if name == "dragoman_requests_total"}
    assert requests == {
        (("dialect", "openai"), ("model", "m"), ("route", "/v1/chat/completions"), ("status", "200")): 2.0,
        (("dialect", "ollama"), ("model", "m"), ("route", "/api/chat"), ("status", "200")): 1.0,
        (("dialect", "openai"), ("model", "m"), ("route", "/v1/chat/completions"), ("status", "429")): 1.0,
        (("dialect", "ollama"), ("model", ""), ("route", "other"), ("status", "404")): 2.0,  # unknown paths: one series
    }
    assert got[("dragoman_tokens_total", (("direction", "in"), ("model", "m")))] == 15.0
    assert got[("dragoman_time_to_first_token_seconds_count", (("dialect", "openai"), ("model", "m")))] == 2.0
    # A request that produced no token makes no time-to-first-token series of its own.
    assert ("dragoman_time_to_first_token_seconds_count", (("dialect", "ollama"), ("model", ""))) not in got


def test_embedding_requests_count_apart() -> None:
    metrics = Metrics(lambda: iter(()))
    r = record("/api/embed", 200, ttft=False)
    r.embed_inputs = 4
    metrics.observe(r, r.started + 0.02)
    metrics.observe(r, r.started + 0.02)
    got = samples(metrics)
    assert got[("dragoman_embedding_inputs_total", (("model", "m"),))] == 8.0
    assert got[("dragoman_embedding_requests_total", (("model", "m"), ("status", "200")))] == 2.0
    assert got[("dragoman_tokens_total", (("direction", "in"), ("model", "m")))] == 10.0


def test_cached_prompt_tokens_count_apart_from_the_prompt() -> None:
    """Counted in dragoman_tokens{direction="in"} already, so in a counter of their own;
    a backend that cannot tell (None) adds no series."""
    metrics = Metrics(lambda: iter(()))
    for cached, entry in [(4, "m"), (0, "m"), (None, "other")]:
        r = record("/v1/chat/completions", 200, entry=entry)
        r.usage = Usage(prompt_tokens=5, completion_tokens=3, cached_tokens=cached)
        metrics.observe(r, r.started + 0.05)
    got = samples(metrics)
    assert got[("dragoman_cached_prompt_tokens_total", (("model", "m"),))] == 4.0
    assert ("dragoman_cached_prompt_tokens_total", (("model", "other"),)) not in got
    assert got[("dragoman_tokens_total", (("direction", "in"), ("model", "m")))] == 10.0
