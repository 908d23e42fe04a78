"""How long a loaded model stays. Keep-alive follows Ollama: seconds after the last
request finishes; 0 unloads right away; negative keeps the model forever. (How many
requests it takes at once: :mod:`backends.admission`.)"""

from __future__ import annotations

import datetime as dt


def keep_alive_for(requested: float | None, configured: float) -> float:
    """The request's ``keep_alive`` overrides the model entry's."""
    return configured if requested is None else requested


def expiry_time(keep_alive: float, now: dt.datetime) -> dt.datetime | None:
    """When an idle model unloads; None = never, ``now`` = at once."""
    if keep_alive < 0:
        return None
    return now + dt.timedelta(seconds=keep_alive)
