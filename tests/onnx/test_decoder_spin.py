"""``spin``: the batch engine's intra-op threads spin within a pass only when asked, or
with ``auto`` while the cores are quiet (spinning threads fight other work on busy
cores), and the answers do not change with it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dragoman.adapters.canonical import ContentDelta
from dragoman.backends.onnx import OnnxBackend
from dragoman.backends.onnx.worker import decoder as decoder_module
from dragoman.backends.onnx.worker.decoder import Decoder
from dragoman.backends.onnx.settings import OnnxSettings
from tests.onnx.conftest import MODEL_NAME, ask, collect

@pytest.mark.parametrize(("spin", "allowed", "stop"), [(False, "0", None), (True, "1", "1")])
def test_the_session_spins_only_when_asked(model_dir: Path, spin: bool, allowed: str, stop: str | None) -> None:
    options = Decoder(model_dir, spin=spin).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == allowed
    if stop is not None:  # spinning stops when a pass returns: the cores are the gateway's between steps
        assert options.get_session_config_entry("session.force_spinning_stop") == stop


@pytest.mark.asyncio(loop_scope="module")
async def test_spinning_sleeping_and_auto_backends_answer_alike(
    make_backend: Callable[..., OnnxBackend], backend: OnnxBackend
) -> None:
    others = [make_backend(spin=True), make_backend(spin=False)]  # the module's backend runs the default, auto
    for each in others:
        await each.load(MODEL_NAME, None)
    try:
        request = ask("Name three colours.", temperature=0, num_predict=24)
        texts = []
        for each in (backend, *others):
            events = await collect(each.chat(request))
            texts.append("".join(e.text for e in events if isinstance(e, ContentDelta)))
        assert texts[0] and texts[0] == texts[1] == texts[2]
    finally:
        for each in others:
            await each.aclose()


class Told:
    """A watch that says what the test tells it."""

    available = True

    def __init__(self, quiet: bool) -> None:
        self.said = quiet

    def quiet(self) -> bool:
        return self.said


def test_auto_spins_while_the_cores_are_quiet_and_the_logits_do_not_change(model_dir: Path) -> None:
    watch = Told(quiet=False)
    decoder = Decoder(model_dir, spin="auto", watch=watch)  # type: ignore[arg-type]
    assert decoder.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    slab = decoder.new_slab(64)
    slab.ensure(2, 16)
    prompt = np.arange(1, 13, dtype=np.int64)
    sleeping = decoder.prefill(slab, 0, prompt, 0)
    watch.said = True
    spinning = decoder.prefill(slab, 1, prompt, 0)
    assert decoder.passes == {"spinning": 1, "sleeping": 1}
    assert np.array_equal(sleeping, spinning)
    rows = decoder.decode(slab, np.array([7, 7]), np.array([12, 12]))  # both rows in one spinning pass
    watch.said = False
    again = decoder.decode(slab, np.array([7, 7]), np.array([12, 12]))  # the same pass, sleeping
    assert decoder.passes == {"spinning": 2, "sleeping": 2}
    assert np.array_equal(rows, again)


def test_auto_goes_without_the_second_session_for_a_big_model(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoder_module, "AUTO_SPIN_MAX_BYTES", 1024)  # the model's weights are past it
    decoder = Decoder(model_dir, spin="auto", watch=Told(quiet=True))  # type: ignore[arg-type]
    assert decoder.spin_mode == "never"
    slab = decoder.new_slab(64)
    slab.ensure(1, 16)
    decoder.prefill(slab, 0, np.arange(1, 5, dtype=np.int64), 0)
    assert decoder.passes == {"spinning": 0, "sleeping": 1}


def test_auto_is_the_default() -> None:
    assert OnnxSettings().spin == "auto"
