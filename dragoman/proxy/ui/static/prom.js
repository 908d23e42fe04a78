// Prometheus' text format as /metrics writes it: one sample a line,
// name{label="value",…} number. Comments and blank lines carry nothing we need.

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = SAMPLE.exec(line);
    if (match) samples.push({ name: match[1], labels: labels(match[2] || ""), value: number(match[3]) });
  }
  return samples;
}

export function total(samples, name, keep = () => true) {
  let sum = 0;
  for (const s of samples) if (s.name === name && keep(s.labels)) sum += s.value;
  return sum;
}

function labels(text) {
  const out = {};
  for (const match of text.matchAll(LABEL)) {
    out[match[1]] = match[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
  }
  return out;
}

function number(text) {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return Number(text);
}
