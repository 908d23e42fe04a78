"""OpenAI's ``logit_bias`` (token id → bias added to its logit) as the canonical map.

Read and bounded before any work: keys are token ids written as decimal strings,
biases lie in OpenAI's -100…100, and at most :data:`MAX_LOGIT_BIAS` entries are taken
(OpenAI's own limit is 300; vLLM and llama-server take more). Whether the ids exist in
the model's vocabulary is the backend's to check.
"""

from __future__ import annotations

from dragoman.adapters.errors import RequestError

MAX_LOGIT_BIAS = 1024
BIAS_RANGE = 100.0


def parse_logit_bias(raw: dict[str, float] | None, param: str = "logit_bias") -> dict[int, float] | None:
    """The map with int keys; None for none or an empty one. A 400 names the entry."""
    if not raw:
        return None
    if len(raw) > MAX_LOGIT_BIAS:
        raise RequestError(f"{param}: {len(raw)} entries; at most {MAX_LOGIT_BIAS} are taken", param=param)
    bias: dict[int, float] = {}
    for key, value in raw.items():
        if not (key.isascii() and key.isdigit()) or len(key) > 9:
            raise RequestError(f"{param}: '{key[:32]}' is no token id; keys are token ids (non-negative integers as strings)", param=param)
        if not -BIAS_RANGE <= value <= BIAS_RANGE:
            raise RequestError(f"{param}: the bias of {key} must be between -100 and 100, got {value}", param=param)
        bias[int(key)] = float(value)
    return bias


def wire_logit_bias(bias: dict[int, float] | None) -> dict[str, float] | None:
    """The map as OpenAI's wire writes it (string keys)."""
    return {str(token): value for token, value in bias.items()} if bias else None
