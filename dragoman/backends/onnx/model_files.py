"""A model entry's files: where they are, which providers to try, and what the files
say (facts, chat template, special tokens) — read once, until the model reloads."""

from __future__ import annotations

from pathlib import Path

from dragoman.adapters.errors import BackendError
from dragoman.backends.onnx.model_facts import ModelFacts, read_model_facts
from dragoman.backends.onnx.prepare import PrepareError, catalogue, default_model_path, is_prepared, prepare_in_subprocess
from dragoman.backends.onnx.prepare import hf_build, registry
from dragoman.backends.onnx.prepare.hf_names import is_hf
from dragoman.backends.onnx.prepare.background import prepare_in_background, pull_progress, pull_source, registry_name
from dragoman.backends.onnx.prepare.build import GGUF_SHA256
from dragoman.backends.onnx.providers import Provider, candidate_providers, installed_flavours
from dragoman.backends.onnx.settings import OnnxSettings
from dragoman.backends.onnx.vocab import TokenizerFacts, read_tokenizer_facts
from dragoman.backends.pull import ProgressCallback
from dragoman.backends.text.chat_template import load_chat_template, special_tokens
from dragoman.config.paths import models_dir


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
        if self.settings.model is not None:
            try:
                return self.built().path
            except LookupError:  # ensure() and ready() say why; nothing is read from here
                return models_dir() / self.settings.model
        return default_model_path(self.candidates()[0])

    def built(self) -> catalogue.Build:
        """The build ``model:`` names, for the first candidate provider that has one;
        LookupError says what is built instead."""
        assert self.settings.model is not None
        return catalogue.find(self.settings.model, list(self.candidates()))

    def missing_build(self) -> str | None:
        """Why ``model:`` names no build (None when it does, or when ``path`` is used)."""
        if self.settings.model is None:
            return None
        try:
            self.built()
        except LookupError as exc:
            return f"model '{self.name}': {exc}"
        return None

    def default_build(self, model_dir: Path) -> Provider | None:
        """The provider the default model at ``model_dir`` is built for; None when
        ``model_dir`` is not where :func:`prepare_smollm2` builds."""
        for provider in ("cpu", "cuda", "dml"):
            if model_dir.resolve() == default_model_path(provider).resolve():  # type: ignore[arg-type]
                return provider  # type: ignore[return-value]
        return None

    async def ensure(self, progress: ProgressCallback | None = None) -> Path:
        """The model folder; the default model is built first when it is missing
        (``progress`` hears of each stage, as ``/api/pull`` reports them). A ``model:``
        name that is not built is built by a pull when ``ollama:NAME`` is in the local
        Ollama store (or NAME is a known name); otherwise it is a 404 saying what to run."""
        missing = self.missing_build()
        if missing:
            return await self._build_named(missing, progress)
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
            command = f"python -m dragoman.backends.onnx.prepare {build_provider}"
            raise BackendError(f"model '{self.name}' is not built yet; run: dragoman models prepare (or {command})")
        digest = f"sha256:{GGUF_SHA256}"  # the build's source: what is being "pulled"
        try:
            built = await prepare_in_subprocess(build_provider, model_dir, pull_progress(progress, digest))
        except PrepareError as exc:
            raise BackendError(f"model '{self.name}': {exc}") from exc
        return built

    async def _build_named(self, missing: str, progress: ProgressCallback | None) -> Path:
        assert self.settings.model is not None
        if is_hf(self.settings.model) and progress is not None and self.settings.prepare:
            try:  # from Hugging Face: the folder for this entry's provider, or a GGUF then built
                return (await hf_build.pull(self.settings.model, provider=self.candidates()[0], report=progress)).path
            except PrepareError as exc:
                raise BackendError(f"model '{self.name}': {exc}") from exc
        source = pull_source(self.settings.model) or pull_source(f"ollama:{self.settings.model}")
        fetch = registry_name(self.settings.model) if source is None else None
        if progress is None or (source is None and fetch is None) or not self.settings.prepare:
            raise BackendError(missing, status=404)
        try:
            if fetch is not None:  # not on this machine: from the registry first, into DRAGOMAN_HOME/ollama
                await registry.pull(fetch, registry=registry.address(), report=progress)
                source = f"ollama:{fetch}"
            assert source is not None
            build = await prepare_in_background(
                source, name=self.settings.model, provider=self.candidates()[0],
                on_progress=pull_progress(progress, None),
            )  # fmt: skip
        except PrepareError as exc:
            raise BackendError(f"model '{self.name}': {exc}") from exc
        return build.path

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
