"""The seed spec the wire types are checked against, kept in the repository
(tests/fixtures/README.md says where it came from)."""

from __future__ import annotations

from pathlib import Path

SEED_SPEC = Path(__file__).resolve().parents[1] / "fixtures" / "ollama-chat-openapi.yaml"
