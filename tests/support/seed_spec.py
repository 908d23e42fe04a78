"""Where the seed spec is: ``shared/spec`` beside the checkout, or beside a folder
above it (a git worktree under ``wt/`` sits one level deeper than the main checkout)."""

from __future__ import annotations

from pathlib import Path

_NAME = Path("shared") / "spec" / "ollama-chat-openapi.yaml"
_ROOT = Path(__file__).resolve().parents[2]

SEED_SPEC = next((p / _NAME for p in _ROOT.parents if (p / _NAME).is_file()), _ROOT.parent / _NAME)
