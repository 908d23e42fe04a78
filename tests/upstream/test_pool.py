"""Endpoint choice without HTTP: least outstanding first, ties in turn, health."""

from __future__ import annotations

import pytest

from dragoman.backends.upstream.endpoints import EndpointPool, display_url


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool(n: int = 3, *, max_failures: int = 2, cooldown: float = 10.0) -> tuple[EndpointPool, Clock]:
    clock = Clock()
    urls = [f"http://e{i}" for i in range(n)]
    return EndpointPool(urls, max_failures=max_failures, cooldown=cooldown, clock=clock), clock


def labels(p: EndpointPool) -> list[str]:
    return [e.url.removeprefix("http://") for e in p.order()]


def test_idle_endpoints_take_turns() -> None:
    p, _ = pool()
    firsts = [labels(p)[0] for _ in range(6)]
    assert firsts == ["e1", "e2", "e0", "e1", "e2", "e0"]


OUTSTANDING = [
    # (name, outstanding per endpoint, first choice)
    ("fewest first", [2, 0, 1], "e1"),
    ("busy one last", [0, 0, 5], None),
    ("all equal: turn decides", [1, 1, 1], None),
]


@pytest.mark.parametrize(("name", "outstanding", "first"), OUTSTANDING, ids=[c[0] for c in OUTSTANDING])
def test_least_outstanding_first(name: str, outstanding: list[int], first: str | None) -> None:
    p, _ = pool()
    for endpoint, n in zip(p.endpoints, outstanding):
        endpoint.outstanding = n
    for _ in range(3):
        order = labels(p)
        counts = [outstanding[int(label[1])] for label in order]
        assert counts == sorted(counts)
        if first is not None:
            assert order[0] == first


def test_failing_endpoint_is_skipped_for_the_cooldown_then_tried_again() -> None:
    p, clock = pool(max_failures=2, cooldown=10)
    e0 = p.endpoints[0]
    p.failed(e0, "HTTP 503")
    assert "e0" in labels(p)  # one failure is not enough
    p.failed(e0, "HTTP 503")
    assert all("e0" not in labels(p) for _ in range(3))
    clock.now += 10.1
    assert "e0" in labels(p)  # tried again after the cooldown
    p.failed(e0, "still down")
    assert "e0" not in labels(p)  # and one more failure sends it straight back
    p.succeeded(e0)
    assert "e0" in labels(p) and e0.failures == 0


def test_a_success_resets_the_count() -> None:
    p, _ = pool(max_failures=2)
    e0 = p.endpoints[0]
    p.failed(e0, "x")
    p.succeeded(e0)
    p.failed(e0, "x")
    assert "e0" in labels(p)


def test_when_all_are_cooling_the_soonest_ready_is_tried_first() -> None:
    p, clock = pool(max_failures=1, cooldown=10)
    for i, endpoint in enumerate(p.endpoints):
        clock.now = 100.0 + [5, 1, 3][i]
        p.failed(endpoint, "down")
    assert labels(p) == ["e1", "e2", "e0"]


URLS = [
    ("no credentials", "http://gpu-box:8000/v1", "http://gpu-box:8000/v1"),
    ("user and password", "https://bob:s3cret@api.example.com/v1", "https://api.example.com/v1"),
]


@pytest.mark.parametrize(("name", "url", "shown"), URLS, ids=[u[0] for u in URLS])
def test_display_url_hides_credentials(name: str, url: str, shown: str) -> None:
    assert display_url(url) == shown
