"""A model entry's files: where they are, which providers to try, and what the files
say (facts, chat template, special tokens) — read once, until the model reloads."""

from __future__ import annotations

from pathlib import Path

from adapters.errors import BackendError
from backends.onnx.model_info import ModelFacts, read_model_facts
from backends.onnx.prepare import (
    GGUF_SHA256,
    STAGES,
    PrepareError,
    default_model_path,
    is_prepared,
    prepare_in_subprocess,
)
from backends.onnx.providers import Provider, candidate_providers, installed_flavours
from backends.onnx.settings import OnnxSettings
from backends.onnx.vocab import TokenizerFacts, read_tokenizer_facts
from backends.pull import ProgressCallback, PullProgress, stage_progress
from backends.text.chat_template import load_chat_template, special_tokens


class ModelFiles:
    def __init__(self, name: str, settings: OnnxSettings, configured_context: int | None) -> None:
        self.name = name
        self.settings = settings
        self._configured = configured_context
        self._candidates: list[Provider] | None = None
        self._facts: ModelFacts | None = None
        self._template: str | None = None
        self._template_tokens: dict[str, str] | None = None
        self._tokenizer: TokenizerFacts | None = None

    def forget(self) -> None:
        """Read the files again (a reload may follow a rebuild)."""
        self._facts = None
        self._template = None
        self._template_tokens = None
        self._tokenizer = None

    def candidates(self) -> list[Provider]:
        if self._candidates is None:
            self._candidates = candidate_providers(self.settings.provider, installed_flavours())
        return self._candidates

    def folder(self) -> Path:
        if self.settings.path is not None:
            return Path(self.settings.path).expanduser()
        return default_model_path(self.candidates()[0])

    def default_build(self, model_dir: Path) -> Provider | None:
        """The provider the default model at ``model_dir`` is built for; None when
        ``model_dir`` is not where :func:`prepare_smollm2` builds."""
        for provider in ("cpu", "cuda", "dml"):
            if model_dir.resolve() == default_model_path(provider).resolve():  # type: ignore[arg-type]
                return provider  # type: ignore[return-value]
        return None

    async def ensure(self, progress: ProgressCallback | None = None) -> Path:
        """The model folder; the default model is built first when it is missing
        (``progress`` hears of each stage, as ``/api/pull`` reports them)."""
        model_dir = self.folder()
        if is_prepared(model_dir):
            return model_dir
        build_provider = self.default_build(model_dir)
        if build_provider is None:
            if not (model_dir / "genai_config.json").is_file():
                raise BackendError(
                    f"model '{self.name}': {model_dir} holds no genai_config.json (not an ONNX Runtime GenAI model)"
                )
            return model_dir
        if not self.settings.prepare:
            command = f"python -m backends.onnx.prepare {build_provider}"
            raise BackendError(f"model '{self.name}' is not built yet; run: dragoman models prepare (or {command})")
        digest = f"sha256:{GGUF_SHA256}"  # the build's source: what is being "pulled"

        def on_line(line: str) -> None:
            if progress is not None and (step := stage_progress(line, digest)) is not None:
                progress(step)

        try:
            built = await prepare_in_subprocess(build_provider, model_dir, on_line)
        except PrepareError as exc:
            raise BackendError(f"model '{self.name}': {exc}") from exc
        if progress is not None:
            progress(PullProgress(status=f"built {built.name}", digest=digest, total=STAGES, completed=STAGES))
        return built

    def facts(self) -> ModelFacts:
        if self._facts is None:
            self._facts = read_model_facts(self.folder())
        return self._facts

    def chat_template(self) -> str:
        if self._template is None:
            self._template = load_chat_template(self.folder(), self.settings.template)
        return self._template

    def template_tokens(self) -> dict[str, str]:
        """``bos_token`` / ``eos_token`` strings templates refer to."""
        if self._template_tokens is None:
            self._template_tokens = special_tokens(self.folder())
        return self._template_tokens

    def tokenizer(self) -> TokenizerFacts:
        if self._tokenizer is None:
            self._tokenizer = read_tokenizer_facts(self.folder())
        return self._tokenizer

    def configured_context(self) -> int | None:
        model_max = self.facts().context_length
        if self._configured and model_max:
            return min(self._configured, model_max)
        return self._configured or model_max

    def context_length(self, num_ctx: int | None, model_context: int) -> int:
        """The context one request gets: its ``num_ctx``, within the entry's
        configured ``context_length`` (the operator's memory bound) and the model's."""
        limit = min((c for c in (model_context, self.configured_context()) if c), default=2048)
        wanted = num_ctx if num_ctx and num_ctx > 0 else limit
        return min(wanted, limit)
