"""``spin``: the batch engine's intra-op threads spin within a pass only when asked
(they fight other work on busy cores), and the answers do not change with it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.canonical import ContentDelta
from backends.onnx import OnnxBackend
from backends.onnx.decoder import Decoder
from tests.onnx.conftest import MODEL_NAME, ask, collect

@pytest.mark.parametrize(("spin", "allowed", "stop"), [(False, "0", None), (True, "1", "1")])
def test_the_session_spins_only_when_asked(model_dir: Path, spin: bool, allowed: str, stop: str | None) -> None:
    options = Decoder(model_dir, spin=spin).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == allowed
    if stop is not None:  # spinning stops when a pass returns: the cores are the gateway's between steps
        assert options.get_session_config_entry("session.force_spinning_stop") == stop


@pytest.mark.asyncio(loop_scope="module")
async def test_a_spinning_backend_answers_as_the_default(
    make_backend: Callable[..., OnnxBackend], backend: OnnxBackend
) -> None:
    spinning = make_backend(spin=True)
    await spinning.load(MODEL_NAME, None)
    try:
        request = ask("Name three colours.", temperature=0, num_predict=24)
        texts = []
        for each in (backend, spinning):
            events = await collect(each.chat(request))
            texts.append("".join(e.text for e in events if isinstance(e, ContentDelta)))
        assert texts[0] and texts[0] == texts[1]
    finally:
        await spinning.aclose()
