"""Request sampling options → what the worker does with them.

Knobs the library has go into :class:`Search` (``set_search_options``); the rest go
into :class:`Processing`, numpy logits processors in the worker. Neutral values turn
a knob off here, so they cost nothing at generation time.
"""

from __future__ import annotations

from dragoman.adapters.canonical import SamplingOptions
from dragoman.backends.onnx.worker_protocol import Processing, Search

DEFAULT_PENALTY_WINDOW = 64  # tokens, as Ollama's repeat_last_n


def plan_sampling(options: SamplingOptions, *, vocab_size: int | None = None) -> tuple[Search, Processing]:
    """Options already merged with the model's defaults. Temperature 0 or unset is
    greedy; ``repeat_penalty`` is the library's over the whole sequence unless
    ``repeat_last_n`` narrows it (then the worker applies it to that window)."""
    seed = library_seed(options.seed)
    sampling = bool(options.temperature)  # None and 0.0 are greedy
    window = options.repeat_last_n
    repeat = _unless(options.repeat_penalty, 1.0)
    own_repeat = repeat is not None and window is not None and window > 0
    if window == 0:  # Ollama: 0 disables the repeat penalty
        repeat = None
    processing = Processing(
        min_p=_unless(options.min_p, 0.0) if sampling else None,
        repeat_penalty=repeat if own_repeat else None,
        repeat_last_n=window if window and window > 0 else None,
        presence_penalty=_unless(options.presence_penalty, 0.0),
        frequency_penalty=_unless(options.frequency_penalty, 0.0),
        tfs_z=options.tfs_z if sampling and options.tfs_z is not None and 0 < options.tfs_z < 1 else None,
        mirostat=(options.mirostat or 0) if sampling else 0,
        mirostat_tau=options.mirostat_tau if options.mirostat_tau is not None else 5.0,
        mirostat_eta=options.mirostat_eta if options.mirostat_eta is not None else 0.1,
        temperature=options.temperature or 1.0,
        seed=seed,
    )
    if processing.mirostat:
        # The worker picks the token itself and masks every other one.
        return Search(do_sample=False), processing
    search = Search(
        do_sample=sampling,
        temperature=options.temperature if sampling else None,
        top_p=options.top_p if sampling else None,
        top_k=_top_k(options.top_k, vocab_size) if sampling else None,
        repetition_penalty=None if own_repeat else repeat,
        random_seed=seed if sampling else None,
    )
    return search, processing


def processing_active(processing: Processing) -> bool:
    return any(
        (
            processing.min_p,
            processing.repeat_penalty,
            processing.presence_penalty,
            processing.frequency_penalty,
            processing.tfs_z,
            processing.mirostat,
            processing.logit_bias,
        )
    )


def max_new_tokens(options: SamplingOptions) -> int | None:
    """``num_predict``; negative (Ollama's -1 infinite, -2 fill) means no limit."""
    if options.num_predict is None or options.num_predict < 0:
        return None
    return options.num_predict


def library_seed(seed: int | None) -> int | None:
    """The library takes a non-negative int32; a negative seed means "random", as
    Ollama's -1. Larger seeds fold into range (the same seed still gives the same output)."""
    if seed is None or seed < 0:
        return None
    return seed % 2**31


def _top_k(top_k: int | None, vocab_size: int | None) -> int | None:
    """0 is "off" (Ollama); a k past the vocabulary is the whole vocabulary, as Ollama clamps."""
    if not top_k:
        return None
    if vocab_size is not None and top_k >= vocab_size:
        return None
    return top_k


def _unless(value: float | None, neutral: float) -> float | None:
    return None if value is None or value == neutral else value
