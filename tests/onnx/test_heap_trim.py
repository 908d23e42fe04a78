"""When the worker loop hands the heap back (:class:`backends.onnx.worker.heap_trim.IdleTrim`): once,
a second after the last round that computed, whatever arrives meanwhile that computes
nothing; not while a request is being prepared or runs.

Each case is the loop's iterations: (holding, what the wait for commands brought, how
long it took, whether the round then computed). An empty wait lasts the limit the policy
gave; an iteration with nothing held, nothing brought and no limit ends the case (the
loop would wait for the next command as long as it takes). The real loop on the real
model is tests/onnx/test_worker_idle_trim.py; this tables the rule itself.
"""

from __future__ import annotations

import pytest

from dragoman.backends.onnx.worker.heap_trim import IdleTrim

Step = tuple[bool, list[str], float, bool]
COMPUTE: Step = (True, [], 0.0, True)  # something to compute: the loop does not wait
IDLE: Step = (False, [], 0.0, False)

CASES: list[tuple[str, list[Step], list[float]]] = [
    ("a reply ends and nothing follows: once", [COMPUTE, IDLE, IDLE], [1.0]),
    # the consumer reads the last tokens after the worker finished: its Credit computes nothing
    ("a late credit does not put it off", [COMPUTE, (False, ["credit"], 0.25, False), (False, ["ping"], 0.5, False), IDLE], [1.0]),
    # between the requests of a burst the pages would fault in again
    ("a request within the second: after it", [COMPUTE, (False, ["start"], 0.5, False), (True, ["prepared"], 0.25, True), IDLE], [1.75]),
    ("a prompt being prepared past the deadline: after it ran",
     [COMPUTE, (False, ["start"], 0.75, False), (True, ["prepared"], 2.0, True), IDLE], [3.75]),
    ("a prompt refused in preparation: a second after", [COMPUTE, (False, ["start"], 0.5, False), (True, ["refused"], 0.25, False), IDLE], [1.75]),
    ("a request held for its consumer", [COMPUTE, (True, ["credit"], 5.0, True), IDLE], [6.0]),
    ("a worker that never computed keeps its heap", [IDLE], []),
    ("every burst once", [COMPUTE, IDLE, (False, ["start"], 3.0, False), (True, ["prepared"], 0.0, True), IDLE], [1.0, 5.0]),
]  # fmt: skip


def handed_back_at(steps: list[Step]) -> list[float]:
    now, at = [0.0], []
    trim = IdleTrim(1.0, clock=lambda: now[0], trim=lambda: at.append(now[0]))
    for holding, brought, took, computed in steps:
        limit = trim.timeout(holding=holding)
        if not brought and not holding:
            if limit is None:
                break
            took = limit
        assert limit is None or took <= limit
        now[0] += took
        if trim.handed_back(brought):
            continue
        if computed:
            trim.computed()
    return at


@pytest.mark.parametrize(("name", "steps", "want"), CASES, ids=[c[0] for c in CASES])
def test_when_the_heap_goes_back(name: str, steps: list[Step], want: list[float]) -> None:
    assert handed_back_at(steps) == want


def test_a_wait_that_wakes_early_trims_at_the_deadline() -> None:
    now, at = [0.0], []
    trim = IdleTrim(1.0, clock=lambda: now[0], trim=lambda: at.append(now[0]))
    trim.computed()
    assert trim.timeout(holding=False) == 1.0
    now[0] = 0.999
    assert not trim.handed_back([]) and at == []
    assert trim.timeout(holding=False) == pytest.approx(0.001)
    now[0] = 1.0
    assert trim.handed_back([]) and at == [1.0]
    assert trim.timeout(holding=False) is None
