"""Where the Generator path's prefix reuse is on, and how big a new Generator is: the
library continues a Generator (``rewind_to`` then ``append_tokens``) only on CPU and CUDA
and not for some model types (DirectML cannot run here: its refusal is the library's
documented one, checked before any request)."""

from __future__ import annotations

import json
from pathlib import Path

from dragoman.backends.onnx.worker.generator_cache import capacity_for, open_cache, why_not_continued


def test_reuse_is_off_where_the_library_cannot_continue_a_generator(model_dir: Path, tmp_path: Path) -> None:
    assert why_not_continued(model_dir, "CPU") is None
    assert why_not_continued(model_dir, "CUDA") is None
    assert "not DML" in (why_not_continued(model_dir, "DML") or "")
    assert not open_cache(model_dir, 256 << 20, 16, 2048, "DML").enabled
    assert open_cache(model_dir, 256 << 20, 16, 2048, "CPU").enabled
    assert not open_cache(model_dir, 0, 16, 2048, "CPU").enabled  # prefix_cache_mib: 0
    config = json.loads((model_dir / "genai_config.json").read_text())
    config["model"]["type"] = "phi3v"
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    assert "phi3v" in (why_not_continued(tmp_path, "CPU") or "")


def test_a_new_generator_is_its_request_rounded_up_to_a_power_of_two() -> None:
    assert capacity_for(56, 2048, 0) == 64  # a short request: no floor (its KV is first-touched memory)
    assert capacity_for(1396, 2048, 0) == 2048  # the next turn of its chat fits
    assert capacity_for(1396, 1500, 0) == 1500  # never past the context
    assert capacity_for(56, 2048, 512) == 512  # at least a sliding window
    assert capacity_for(64, 2048, 0) == 64
