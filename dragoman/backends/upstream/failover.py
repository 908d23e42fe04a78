"""Which endpoints a request tries, when it stops trying, and the error when none
answered — shared by streamed chat and whole-reply POSTs (embeddings, count_tokens)."""

from __future__ import annotations

from dragoman.adapters.errors import BackendError, BackendTimeout, DragomanError
from dragoman.backends.upstream.endpoints import Endpoint
from dragoman.backends.upstream.exchange import Failed


def with_one_retry(endpoints: list[Endpoint]) -> list[Endpoint]:
    """Each endpoint once; a lone endpoint twice, since a pooled connection the server
    closed at the same moment fails without the server being down."""
    return endpoints * 2 if len(endpoints) == 1 else endpoints


def gives_up(attempts: list[Endpoint], failed: Failed) -> bool:
    """The one retry is for broken connections, not slow or failing servers."""
    return len(attempts) == 1 and (failed.timed_out or failed.responded)


def exhausted(model: str, failures: list[tuple[Endpoint, Failed]]) -> DragomanError:
    """The error when no endpoint answered: the upstream's own 5xx if one gave one,
    else 504 if they were all silent, else 502, naming each endpoint and why."""
    if not failures:
        return BackendTimeout(f"model '{model}': total_timeout passed before an upstream answered")
    answered = [f.error for _, f in failures if f.error is not None]
    if answered:
        return answered[-1]
    detail = "; ".join(f"{e.label}: {f.reason}" for e, f in failures)
    if all(f.timed_out for _, f in failures):
        return BackendTimeout(f"model '{model}': upstream {detail}")
    if len({e.url for e, _ in failures}) == 1:
        endpoint, failed = failures[-1]
        verb = "failed" if failed.responded else "unreachable"
        return BackendError(f"model '{model}': upstream {endpoint.label} {verb}: {failed.reason}")
    return BackendError(f"model '{model}': no upstream endpoint answered ({detail})")


__all__ = ["exhausted", "gives_up", "with_one_retry"]
