"""Provider choice from the installed flavours: a pure table, no probing."""

from __future__ import annotations

import pytest

from dragoman.backends.onnx.providers import ProviderError, candidate_providers

CPU = {"onnxruntime-genai": "0.18.0"}
CUDA = {"onnxruntime-genai-cuda": "0.18.1"}
WINML = {"onnxruntime-genai-winml": "0.18.0"}

CASES = [
    ("cpu flavour, cpu", "cpu", CPU, ["cpu"]),
    ("cpu flavour, auto", "auto", CPU, ["cpu"]),
    ("cuda flavour, auto tries cuda then cpu", "auto", CUDA, ["cuda", "cpu"]),
    ("cuda flavour, cuda", "cuda", CUDA, ["cuda"]),
    ("cuda flavour, cpu", "cpu", CUDA, ["cpu"]),
    ("winml flavour, auto", "auto", WINML, ["dml", "cpu"]),
    ("winml flavour, dml", "dml", WINML, ["dml"]),
    ("cuda wanted, cpu flavour", "cuda", CPU, "pip install 'dragoman[cuda]'"),
    ("dml wanted, cpu flavour", "dml", CPU, "pip install 'dragoman[directml]'"),
    ("dml wanted, cuda flavour", "dml", CUDA, "pip uninstall -y onnxruntime-genai-cuda"),
    ("nothing installed", "auto", {}, "onnxruntime-genai is not installed"),
    (
        "two flavours, keep the accelerated one for auto",
        "auto",
        {**CPU, **CUDA},
        "pip uninstall -y onnxruntime-genai && pip install --force-reinstall onnxruntime-genai-cuda",
    ),
    (
        "two flavours, keep cpu when cpu is asked",
        "cpu",
        {**CPU, **CUDA},
        "pip uninstall -y onnxruntime-genai-cuda && pip install --force-reinstall onnxruntime-genai",
    ),
    ("old directml flavour refused", "dml", {"onnxruntime-genai-directml": "0.14.1"}, "0.14.1 is too old"),
]


@pytest.mark.parametrize(("name", "requested", "installed", "expected"), CASES, ids=[c[0] for c in CASES])
def test_candidate_providers(name: str, requested: str, installed: dict[str, str], expected: list[str] | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(ProviderError) as info:
            candidate_providers(requested, installed)  # type: ignore[arg-type]
        assert expected in str(info.value)
    else:
        assert candidate_providers(requested, installed) == expected  # type: ignore[arg-type]


def test_provider_error_is_a_backend_error() -> None:
    from dragoman.adapters.errors import BackendError

    assert issubclass(ProviderError, BackendError)
