"""Identifiers OpenAI clients expect. Random, so two replies never share one (Ollama draws
``chatcmpl-`` plus a number below 1000, and they collide)."""

from __future__ import annotations

import secrets

SYSTEM_FINGERPRINT = "fp_dragoman"


def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def new_text_completion_id() -> str:
    """``/v1/completions`` ids are ``cmpl-…``, as OpenAI and vLLM spell them."""
    return "cmpl-" + secrets.token_hex(12)
