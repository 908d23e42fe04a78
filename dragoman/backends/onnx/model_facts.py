"""What a model folder says about itself, for ``/api/show``, ``/api/tags`` and ``/api/ps``.

Read from ``genai_config.json`` and, for models dragoman built, the build marker;
the entry's settings override both.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from dragoman.backends.onnx.prepare import MARKER


class ModelFacts(msgspec.Struct, frozen=True):
    family: str = ""
    parameter_size: str = ""
    quantization_level: str = ""
    context_length: int | None = None
    size: int = 0
    vocab_size: int | None = None
    embedding_length: int | None = None  # the decoder's hidden size
    parameter_count: int | None = None
    eos_token_ids: tuple[int, ...] = ()  # genai_config's: generation ends at any of them


def read_model_facts(model_dir: Path) -> ModelFacts:
    genai = _json(model_dir / "genai_config.json")
    marker = _json(model_dir / MARKER)
    model = genai.get("model") or {}
    context = model.get("context_length")
    hidden = (model.get("decoder") or {}).get("hidden_size")
    parameter_size = str(marker.get("parameter_size") or "")
    count = marker.get("parameter_count")
    eos = model.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [eos]
    return ModelFacts(
        family=str(marker.get("family") or model.get("type") or ""),
        parameter_size=parameter_size,
        quantization_level=str(marker.get("quantization_level") or ""),
        context_length=int(context) if isinstance(context, int) else None,
        size=model_size(model_dir),
        vocab_size=model["vocab_size"] if isinstance(model.get("vocab_size"), int) else None,
        embedding_length=hidden if isinstance(hidden, int) else None,
        parameter_count=count if isinstance(count, int) else parameters_from_size(parameter_size),
        eos_token_ids=tuple(i for i in eos_ids if isinstance(i, int)),
    )


def parameters_from_size(size: str) -> int | None:
    """``"135M"`` → 135000000: what a build marker without a count still says."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*", size, re.I)
    if match is None:
        return None
    scale = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}[match.group(2).upper()]
    return round(float(match.group(1)) * scale)


def model_size(model_dir: Path) -> int:
    """Bytes of the files a load reads: the ONNX graphs and their external data."""
    try:
        files = [
            f
            for f in model_dir.iterdir()
            if f.is_file() and (f.suffix in (".onnx", ".data") or f.name.endswith(".onnx.data"))
        ]
    except OSError:
        return 0
    return sum(f.stat().st_size for f in files)


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
