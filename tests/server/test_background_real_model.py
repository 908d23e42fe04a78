"""A background response of the real model with the ``openai`` client: created, polled
to its end, and its stream read again from a sequence number, equal to a foreground
reply of the same greedy request."""

from __future__ import annotations

import time

import openai

from tests.support.server import RunningServer

MODEL = "smollm2:135m"
ENDS = "Say hello."  # a prompt this model ends by itself at temperature 0


def test_background_poll_and_resume(real_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)
    ask = {"model": MODEL, "input": ENDS, "temperature": 0, "max_output_tokens": 200}
    foreground = client.responses.create(**ask)
    queued = client.responses.create(**ask, background=True)
    assert queued.status == "queued"
    deadline = time.monotonic() + 120
    while (polled := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert polled.status == "completed" and polled.output_text == foreground.output_text
    events = list(client.responses.retrieve(queued.id, stream=True, starting_after=2))
    assert events[0].sequence_number == 3 and events[-1].type == "response.completed"
    assert events[-1].response.output_text == foreground.output_text
