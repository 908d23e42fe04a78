// llama.cpp (node-llama-cpp 3.21.1, its prebuilt CPU build) as a peer for bench/onnx_speed.py.
//
//   node bench/llamacpp_peer.mjs MODEL.gguf CONTEXT_SIZE
//
// One model and one context sequence stay loaded; every stdin line is a JSON request
// {"prompt": text, "max_tokens": n, "reuse": bool} and gets one JSON line back:
// {"ttft_ms", "decode_tps", "tokens", "text", "prompt_tokens", "reused_tokens"}.
// With "reuse" the sequence keeps the longest prefix it shares with the new prompt
// (llama.cpp's own prefix reuse, as its server does across turns); without it the
// history is cleared first, so the whole prompt is evaluated cold. Greedy (temperature 0).
//
// node-llama-cpp is never committed: install it into the git-ignored .bench-node folder
// with `npm i -E --prefix .bench-node node-llama-cpp@3.21.1`. `build: "never"` keeps it from
// trying to compile llama.cpp (it hangs here otherwise); the high-level chat session exits
// silently on this machine, the low-level sequence.evaluate works.

import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(path.join(root, ".bench-node", "package.json"));
const { getLlama } = await import(require.resolve("node-llama-cpp"));

const [modelPath, contextArg] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
// Without an explicit thread count the first evaluation never started here.
const context = await model.createContext({ contextSize: Number(contextArg || 4096), threads: Number(process.env.LLAMA_THREADS || os.availableParallelism()) });
const sequence = context.getSequence();
const eos = new Set([model.tokens.eos, model.tokens.eot].filter((t) => t != null));

async function run({ prompt, max_tokens: maxTokens, reuse }) {
  const sent = performance.now();
  const tokens = model.tokenize(prompt, true);
  let reused = 0;
  if (reuse) {
    const { firstDifferentIndex } = sequence.compareContextTokens(tokens);
    // At least one token must be evaluated to get logits for the next one.
    reused = Math.min(firstDifferentIndex, tokens.length - 1);
    if (reused < sequence.nextTokenIndex) {
      await sequence.eraseContextTokenRanges([{ start: reused, end: sequence.nextTokenIndex }]);
    }
  } else {
    await sequence.clearHistory();
  }
  let first = null;
  let count = 0;
  const out = [];
  for await (const token of sequence.evaluate(tokens.slice(reused), { temperature: 0 })) {
    if (eos.has(token)) break;
    count += 1;
    out.push(token);
    if (first === null) first = performance.now();
    if (count >= maxTokens) break;
  }
  const end = performance.now();
  return {
    ttft_ms: (first ?? end) - sent,
    decode_tps: count > 1 ? (count - 1) / ((end - first) / 1000) : 0,
    tokens: count,
    text: model.detokenize(out),
    prompt_tokens: tokens.length,
    reused_tokens: reused,
  };
}

process.stdout.write(JSON.stringify({ ready: true, context: context.contextSize }) + "\n");
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  try {
    process.stdout.write(JSON.stringify(await run(JSON.parse(line))) + "\n");
  } catch (error) {
    process.stdout.write(JSON.stringify({ error: String(error) }) + "\n");
  }
}
await context.dispose();
await model.dispose();
