"""The watch that tells the batch engine whether its threads may spin: whether the other
processes have left the cores alone lately (dragoman/backends/onnx/worker/core_watch.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from dragoman.backends.onnx.worker import core_watch
from dragoman.backends.onnx.worker.core_watch import BUSY_CORES, PERIOD, QUIET_READINGS, CoreWatch, CpuReading, others_cores, quiet_streak

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")


@pytest.mark.parametrize(
    ("before", "after", "cores"),
    [
        (CpuReading(0, 10, 1), CpuReading(1, 10, 1), 0.0),  # nobody ran
        (CpuReading(0, 10, 1), CpuReading(1, 12, 3), 0.0),  # only this process: 2 cores of its own
        (CpuReading(0, 10, 1), CpuReading(1, 12, 2), 1.0),  # one core of it someone else's
        (CpuReading(0, 10, 1), CpuReading(0.5, 10.5, 1), 1.0),  # half a second of CPU in half a second
        (CpuReading(0, 10, 1), CpuReading(1, 10, 1.5), 0.0),  # counters of different ticks: never below 0
        (CpuReading(1, 10, 1), CpuReading(1, 11, 1), 0.0),  # no time between them
    ],
)
def test_what_the_other_processes_used(before: CpuReading, after: CpuReading, cores: float) -> None:
    assert others_cores(before, after) == pytest.approx(cores)


@pytest.mark.parametrize(
    ("streak", "others", "after"),
    [(0, 0.0, 1), (3, 0.1, 4), (5, BUSY_CORES - 0.01, 6), (5, BUSY_CORES, 0), (2, 1.7, 0)],
)
def test_a_busy_reading_starts_the_count_again(streak: int, others: float, after: int) -> None:
    assert quiet_streak(streak, others) == after


class Counters:
    """Readings scripted as the other processes' load per period."""

    def __init__(self) -> None:
        self.now = 0.0
        self.machine = 0.0

    def read(self) -> CpuReading:
        return CpuReading(self.now, self.machine, 0.0)

    def advance(self, others: float) -> None:
        self.now += PERIOD
        self.machine += others * PERIOD


def test_quiet_only_after_enough_quiet_readings_and_busy_at_once() -> None:
    counters = Counters()
    watch = CoreWatch(read=counters.read)
    assert watch.available and not watch.quiet()  # not quiet until it has seen it
    said = []
    for others in [0.1] * QUIET_READINGS + [1.0] + [0.0] * QUIET_READINGS:
        counters.advance(others)
        watch.update()
        said.append(watch.quiet())
    assert said == [False] * (QUIET_READINGS - 1) + [True, False] + [False] * (QUIET_READINGS - 1) + [True]


def test_without_counters_it_is_never_quiet() -> None:
    watch = CoreWatch(read=lambda: None)
    watch.update()
    watch.start()  # (no thread: nothing to read)
    assert not watch.available and not watch.quiet()


class LiveCounters:
    """Counters that move with the real clock, the others using ``others`` cores."""

    def __init__(self) -> None:
        self.others = 0.0
        self.at = time.monotonic()
        self.machine = 0.0

    def read(self) -> CpuReading:
        now = time.monotonic()
        self.machine += self.others * (now - self.at)
        self.at = now
        return CpuReading(now, self.machine, 0.0)


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(PERIOD / 4)
    return False


def test_its_thread_keeps_the_answer_fresh_without_being_asked() -> None:
    counters = LiveCounters()
    watch = CoreWatch(read=counters.read)
    watch.start()
    assert wait_until(watch.quiet)  # nobody called update: its thread read the counters
    counters.others = 1.0
    assert wait_until(lambda: not watch.quiet())
    counters.others = 0.0
    assert wait_until(watch.quiet)


@linux_only
def test_the_kernel_counters_see_another_process_busy() -> None:
    before = core_watch.read_cpu()
    hog = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 5\nwhile time.time() < end: pass"])
    try:
        time.sleep(1.0)  # this process sleeps; the hog takes a core
        after = core_watch.read_cpu()
    finally:
        hog.kill()
        hog.wait()
    assert before is not None and after is not None
    assert others_cores(before, after) >= 0.6  # one core busy (and the interpreter's start-up)


@linux_only
def test_this_process_is_counted_in_the_machine_in_the_same_units() -> None:
    before = core_watch.read_cpu()
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:  # busy here, on one core
        pass
    after = core_watch.read_cpu()
    assert before is not None and after is not None
    own = after.own - before.own
    assert own >= 0.5  # this process's second (less what the scheduler gave others)
    # The machine's count includes it (to a tick of 10 ms each side), so what the
    # watch subtracts is this process's own share, not more.
    assert after.machine - before.machine >= own - 0.05
