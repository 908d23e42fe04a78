"""How far kernel rounding moves a row's logits, against what a broken layout does
(issue 23): the figures behind the bound of ``self_check`` in dragoman/backends/onnx/worker/decoder.py.

    DRAGOMAN_HOME=.dragoman-test-home .venv/bin/python bench/kernel_rounding.py [MODEL_DIR]

onnxruntime picks its MatMulNBits kernels by CPU (AVX2, AVX-512, VNNI, ARM64) and by
the number of rows a pass has, so the same row can round differently in a batch than
alone, and in a one-token pass than in a prompt chunk. Rerun this on a new CPU: it
prints the CPU's model and flags, then for each comparison the largest and median
divergence (:func:`backends.onnx.worker.decoder.divergence`: max |Δ| over the logits' spread)
and how often the argmax differs.

Rounding (what the engine must accept):
  * a row decoded in a batch of 2, 4 or 8 rows of other prompts and lengths, against
    the same row decoded alone;
  * a prompt's last token as a one-token (decode) pass against the same position
    computed by the prompt in one pass;
  * 8 greedy steps from one-token-pass KV against the same positions prefilled;
  * a prompt prefilled in chunks of 2, 3, 7 and 64 tokens against in one pass: the KV
    (bytes) and the last logits.

Broken layouts (what it must refuse), one row decoded among others:
  * the row reads another row's KV (another prompt of the same length);
  * the attention mask one too long (position + 1, reading a slot never written);
  * the mask one too short (position − 1, the new token overwrites the last one).
"""

from __future__ import annotations

import platform
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dragoman.backends.onnx.worker.decoder import ROUNDING_BOUND, Decoder, divergence, measure  # noqa: E402

TEXTS = [
    "Write a long story about a dragon who guards a lighthouse.",
    "What is the capital of France?",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Note 1: the lighthouse keeper counted 7 ships passing at dusk. " * 6,
    "Name three colours.",
    "The quick brown fox jumps over the lazy dog, and then " * 12,
    '{"city": "Paris", "weather": "sunny", "temperature": 21}',
    "Tell me about cats and dogs, their history, and why people keep them.",
]


def cpu() -> str:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags = set(value.split())
    except OSError:
        pass
    shown = sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "asimd", "sve", "i8mm", "dotprod")))
    return f"{model} ({platform.machine()}): {' '.join(shown) or 'flags unknown'}"


def prompts(model_dir: Path) -> list[np.ndarray]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return [np.array(tokenizer.encode(text).ids, dtype=np.int64) for text in TEXTS]


def prefill(decoder: Decoder, slab, row: int, tokens: np.ndarray, chunk: int = 64) -> np.ndarray:
    logits, start = None, 0
    while start < len(tokens):
        end = min(len(tokens), start + chunk)
        if len(tokens) - end == 1:  # never leave one token for a pass of its own
            end += 1
        logits = decoder.prefill(slab, row, tokens[start:end], start)
        start = end
    return logits


def alone(decoder: Decoder, tokens: np.ndarray, next_token: int) -> np.ndarray:
    slab = decoder.new_slab(512)
    slab.ensure(1, len(tokens) + 2)
    prefill(decoder, slab, 0, tokens)
    return decoder.decode(slab, np.array([next_token]), np.array([len(tokens)]))[0]


def batch(decoder: Decoder, rows: list[np.ndarray], next_tokens: list[int], *, lengths=None, swap=None) -> np.ndarray:
    """Every row prefilled on its own, then one decode pass over all of them; ``lengths``
    overrides the mask, ``swap=(i, j)`` exchanges two rows' KV first."""
    slab = decoder.new_slab(512)
    slab.ensure(len(rows), max(len(r) for r in rows) + 3)
    for i, tokens in enumerate(rows):
        prefill(decoder, slab, i, tokens)
    if swap:
        slab.swap(*swap, max(len(r) for r in rows))
    given = np.array([len(r) for r in rows]) if lengths is None else np.asarray(lengths)
    return decoder.decode(slab, np.array(next_tokens), given)


ABSOLUTE: list[float] = []  # max |Δ| in logits of the comparisons since the last report


def compare(expected: np.ndarray, got: np.ndarray) -> float:
    ABSOLUTE.append(float(np.abs(got - expected).max()))
    return divergence(expected, got)


def report(name: str, values: list[float], flips: int = 0) -> list[float]:
    print(f"  {name:55s} n={len(values):3d}  max {max(values):.1e}  median {statistics.median(values):.1e}"
          f"  (max |Δ| {max(ABSOLUTE):.2f} logits)  argmax differs {flips}")
    ABSOLUTE.clear()
    return values


def flip(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.argmax(a) != np.argmax(b))


def main() -> None:
    from dragoman.backends.onnx.model_files import default_model_path

    model_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else default_model_path("cpu")
    decoder = Decoder(model_dir)
    texts = prompts(model_dir)
    nexts = [int(t[len(t) // 2]) for t in texts]  # some token of the prompt as the next one
    print(f"CPU: {cpu()}")
    print(f"model: {model_dir.name}; prompts of {sorted(len(t) for t in texts)} tokens; bound {ROUNDING_BOUND:g}")
    print("rounding (must be accepted):")
    rounding: list[float] = []
    refs = [alone(decoder, t, n) for t, n in zip(texts, nexts, strict=True)]
    for size in (2, 4, 8):
        got, flips = [], 0
        for offset in range(len(texts)):
            picked = [(offset + k) % len(texts) for k in range(size)]
            logits = batch(decoder, [texts[i] for i in picked], [nexts[i] for i in picked])
            got += [compare(refs[i], logits[k]) for k, i in enumerate(picked)]
            flips += sum(flip(refs[i], logits[k]) for k, i in enumerate(picked))
        rounding += report(f"batched in {size} rows vs alone", got, flips)
    got, flips = [], 0
    for tokens in texts:
        slab = decoder.new_slab(512)
        slab.ensure(1, len(tokens) + 2)
        whole = prefill(decoder, slab, 0, tokens)
        slab.data[:] = 0
        prefill(decoder, slab, 0, tokens[:-1])
        single = decoder.decode(slab, np.array([tokens[-1]]), np.array([len(tokens) - 1]))[0]
        got.append(compare(whole, single))
        flips += flip(whole, single)
    rounding += report("last prompt token: one-token pass vs in the prompt's pass", got, flips)
    got, flips = [], 0
    for tokens in texts:  # greedy steps on one-token-pass KV, against the same tokens prefilled
        slab = decoder.new_slab(512)
        slab.ensure(1, len(tokens) + 10)
        logits = prefill(decoder, slab, 0, tokens)
        seq = list(tokens)
        for _ in range(8):
            seq.append(int(np.argmax(logits)))
            logits = decoder.decode(slab, np.array([seq[-1]]), np.array([len(seq) - 1]))[0]
        fresh = decoder.new_slab(512)
        fresh.ensure(1, len(seq) + 2)
        again = prefill(decoder, fresh, 0, np.array(seq))
        got.append(compare(again, logits))
        flips += flip(again, logits)
    rounding += report("after 8 greedy one-token passes vs the same prefilled", got, flips)
    kv_differs, logit_diffs = 0, []
    for tokens in texts:
        slab = decoder.new_slab(512)
        slab.ensure(1, len(tokens) + 2)
        whole = decoder.prefill(slab, 0, tokens, 0)
        kv = slab.read(0, len(tokens))
        for chunk in (2, 3, 7, 64):
            slab.data[:] = 0
            chunked = prefill(decoder, slab, 0, tokens, chunk)
            kv_differs += int(not np.array_equal(kv, slab.read(0, len(tokens))))
            logit_diffs.append(float(np.abs(whole - chunked).max()))
    print(f"  chunked prefill (chunks 2, 3, 7, 64) vs one pass: KV differs in {kv_differs} of "
          f"{len(logit_diffs)}; last logits max |Δ| {max(logit_diffs):.2e}")
    print("broken layouts (must be refused):")
    broken: list[float] = []
    got, flips = [], 0
    for i in range(len(texts)):
        j = (i + 1) % len(texts)
        n = min(len(texts[i]), len(texts[j]))
        rows = [texts[i][:n], texts[j][:n]]
        reference = alone(decoder, rows[0], nexts[i])
        logits = batch(decoder, rows, [nexts[i], nexts[j]], swap=(0, 1))[0]
        got.append(compare(reference, logits))
        flips += flip(reference, logits)
    broken += report("another row's KV", got, flips)
    for shift, name in ((1, "mask one too long (position + 1)"), (-1, "mask one too short (position - 1)")):
        got, flips = [], 0
        for i in range(len(texts)):
            j = (i + 3) % len(texts)
            rows = [texts[i], texts[j]]
            lengths = [len(texts[i]) + shift, len(texts[j])]
            logits = batch(decoder, rows, [nexts[i], nexts[j]], lengths=lengths)[0]
            got.append(compare(refs[i], logits))
            flips += flip(refs[i], logits)
        broken += report(name, got, flips)
    figures = measure(decoder)
    print(f"self_check's own cases: chunked {figures.chunked:.1e} (KV exact: {figures.chunked_kv_exact}), "
          f"batched {figures.batched:.1e}; broken: "
          + ", ".join(f"{name} {value:.2f}" for name, value in figures.broken.items()))
    low, high, own = max(rounding), min(broken), min(figures.broken.values())
    print(f"largest rounding {low:.3f}; smallest broken {high:.3f} here, {own:.3f} in self_check: the bound "
          f"{ROUNDING_BOUND:g} is {ROUNDING_BOUND / low:.1f}× the rounding and {own / ROUNDING_BOUND:.1f}× below "
          f"self_check's broken layouts")


if __name__ == "__main__":
    main()
