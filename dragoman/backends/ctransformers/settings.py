"""The ``ctransformers`` backend's keys of a model entry, checked at config load:
a model file that exists is sniffed there, so ``dragoman config check`` already says
when ctransformers cannot load it (a missing file is reported when the model loads)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from dragoman.backends.ctransformers.formats import GGML_MODEL_TYPES, inspect_model_file, normalize
from dragoman.backends.ctransformers.prompt import TemplateChoice

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
_KNOWN_TYPES = {normalize(t) for t in (*GGML_MODEL_TYPES, "gguf")}


class CTransformersSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The ``ctransformers`` backend's keys of a model entry (``context_length`` is a
    key every entry has)."""

    path: str  # the model file itself (.gguf or a GGML-era .bin)
    model_type: str | None = None  # needed for GGML-era files; GGUF says it itself
    gpu_layers: NonNegativeInt = 0  # > 0 loads the library's CUDA build
    threads: PositiveInt | None = None  # per instance; unset: the library's choice
    batch_size: PositiveInt = 8  # prompt tokens per evaluation step (the library's default)
    template: TemplateChoice = "auto"
    lib: str | None = None  # "avx2", "avx", "basic", "cuda" or a libctransformers path
    max_concurrent: PositiveInt = 1  # model instances, each with its own KV cache
    max_queue: NonNegativeInt = 16

    def __post_init__(self) -> None:
        if self.model_type is not None and normalize(self.model_type) not in _KNOWN_TYPES:
            raise ValueError(f"model_type '{self.model_type}' is not one of {', '.join((*GGML_MODEL_TYPES, 'gguf'))}")
        path = Path(self.path).expanduser()
        if path.is_dir():
            raise ValueError(f"path {path} is a folder; ctransformers takes the model file itself (.gguf or .bin)")
        if path.is_file():  # a missing file is reported when the model loads, not here
            inspect_model_file(path, self.model_type)  # UnsupportedModelFile is a ValueError
