"""Whether the cores are the worker's own right now, so its threads may spin.

A decode step of the batch engine is hundreds of small ops; threads that sleep between
them are woken for each one, and threads that spin are not: on idle cores a step at
batch 1 took 4.0 ms spinning against 5.5 ms sleeping (SmolLM2-135M int4, 2 cores). But
spinning threads take the cores from any other process that wants them, and every
spinning step then waits on a thread the scheduler has put aside: beside a second model
decoding, a step took 12-14 ms spinning against 6.5 sleeping, and beside a batch of
embeddings chat decoded at 75 against 115 tok/s. So the engine spins only while the
other processes together use less than half a core (in each of the last two readings,
a tenth of a second apart), which this watch tells it from the kernel's counters
(``/proc/stat`` less the worker's own CPU time).

The gateway itself uses ~0.04 cores while forwarding one stream's tokens, well under
the bar. Elsewhere than Linux there are no counters to read, and the watch never says
quiet (the threads sleep, as they do with ``spin: false``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

PERIOD = 0.1  # seconds between readings of the counters (a reading costs ~30 µs)
BUSY_CORES = 0.5  # what the other processes together may use, in cores, for it to be quiet
QUIET_READINGS = 2  # quiet readings in a row before spinning again (a burst of the others ends it at once)


@dataclass(frozen=True)
class CpuReading:
    """Seconds of CPU the whole machine and this process have used, up to ``at``."""

    at: float
    machine: float
    own: float


def others_cores(before: CpuReading, after: CpuReading) -> float:
    """How many cores the other processes used on average between two readings."""
    elapsed = after.at - before.at
    if elapsed <= 0:
        return 0.0
    return max(0.0, (after.machine - before.machine) - (after.own - before.own)) / elapsed


def quiet_streak(streak: int, others: float) -> int:
    """Quiet readings in a row, after one in which the others used ``others`` cores:
    a busy reading starts the count again."""
    return streak + 1 if others < BUSY_CORES else 0


def read_cpu() -> CpuReading | None:
    """The counters now; None where the kernel does not give them (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal [guest guest_nice]: guest time
    # is already counted in user; steal is time another guest of the host took from us.
    if len(fields) < 9 or fields[0] != b"cpu":
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    own = os.times()
    return CpuReading(
        at=time.monotonic(),
        machine=(user + nice + system + irq + softirq + steal) / ticks,
        own=own.user + own.system,
    )


class CoreWatch:
    """``quiet()``: whether the other processes have left the cores alone lately. A
    thread of its own reads the counters every ``PERIOD`` seconds (``start``), so the
    answer is fresh however long the engine was idle: a request that comes just after
    another process's burst runs sleeping for at most two periods, then spins."""

    def __init__(self, read: Callable[[], CpuReading | None] = read_cpu) -> None:
        self._read = read
        self._last = read()
        self._streak = 0
        self.available = self._last is not None

    def quiet(self) -> bool:
        return self._streak >= QUIET_READINGS

    def update(self) -> None:
        """Read the counters and compare them with the last reading."""
        reading = self._read()
        if reading is None or self._last is None:
            return
        self._streak = quiet_streak(self._streak, others_cores(self._last, reading))
        self._last = reading

    def start(self) -> None:
        """Read every ``PERIOD`` seconds, on a daemon thread, for as long as the process runs."""
        if self.available:
            threading.Thread(target=self._every_period, daemon=True, name="core-watch").start()

    def _every_period(self) -> None:
        while True:
            time.sleep(PERIOD)
            self.update()
