"""The second engine of ``bench/onnx_speed.py``: the same config served with ``engine:
generator``, and which engine each server says runs the model."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import yaml

from onnx_decode import MODEL

ROOT = Path(__file__).resolve().parents[1]


async def engine_of(client: httpx.AsyncClient) -> dict[str, str]:
    """What the server says runs the model (``/api/ps``), once it is loaded."""
    running = (await client.get("/api/ps")).json()["models"]
    details = next((m["details"] for m in running if m["name"] == MODEL), {})
    return {"engine": details.get("engine") or "not reported", "reason": details.get("engine_reason") or ""}


def generator_config(config: Path | None, folder: Path) -> Path:
    """The config (the built-in one by default) with ``engine: generator`` on every
    local chat model, for the generator-engine server."""
    data = yaml.safe_load((config or ROOT / "config" / "default.yaml").read_text(encoding="utf-8"))
    for model in data.get("models", []):
        if model.get("backend") == "onnx" and model.get("task", "chat") == "chat":
            model["engine"] = "generator"
    path = folder / f"onnx-bench-generator-{os.getpid()}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
