// Health and traffic, from the same numbers as /metrics (parsed here) and the checks
// of /health/ready. Rates are differences between two scrapes over the time between
// them; counters only grow, so a difference is what happened in between.

import { call } from "./api.js";
import { parseMetrics, total } from "./prom.js";
import { $, el, pill, rate, seconds } from "./util.js";

const HISTORY = 60; // points on the chart: two minutes at one scrape every two seconds
const WINDOW = 5; // scrapes a shown rate is averaged over

const snapshots = [];
const points = [];

// A request with a model label is a chat (or another generation); the page's own
// polling of /api/ps, /metrics and the rest has none, so it does not count as traffic.
const isChat = (labels) => Boolean(labels.model);

export async function refreshMetrics() {
  const samples = parseMetrics(await call("/metrics"));
  const now = performance.now() / 1000;
  const snapshot = {
    t: now,
    requests: total(samples, "dragoman_requests_total", isChat),
    allRequests: total(samples, "dragoman_requests_total"),
    tokensOut: total(samples, "dragoman_tokens_total", (l) => l.direction === "out"),
    tokensIn: total(samples, "dragoman_tokens_total", (l) => l.direction === "in"),
    ttftSum: total(samples, "dragoman_time_to_first_token_seconds_sum"),
    ttftCount: total(samples, "dragoman_time_to_first_token_seconds_count"),
    speedSum: total(samples, "dragoman_generation_tokens_per_second_sum"),
    speedCount: total(samples, "dragoman_generation_tokens_per_second_count"),
    queue: total(samples, "dragoman_queue_depth"),
    active: total(samples, "dragoman_active_requests"),
  };
  // A counter that went down means a restarted server, or another worker process
  // (server.workers) answering this scrape: differences across it mean nothing.
  const previous = snapshots[snapshots.length - 1];
  if (previous && (snapshot.allRequests < previous.allRequests || snapshot.tokensOut < previous.tokensOut)) {
    snapshots.length = 0;
  }
  snapshots.push(snapshot);
  if (snapshots.length > HISTORY + 1) snapshots.shift();
  const last = snapshots[snapshots.length - 1];
  const first = snapshots[Math.max(0, snapshots.length - 1 - WINDOW)];
  const span = last.t - first.t;
  const rps = span > 0 ? (last.requests - first.requests) / span : NaN;
  const tps = span > 0 ? (last.tokensOut - first.tokensOut) / span : NaN;
  if (span > 0) {
    points.push({ rps, tps });
    if (points.length > HISTORY) points.shift();
  }
  // Time to first token over the last two minutes when there was traffic, else since start.
  const old = snapshots[0];
  const recent = last.ttftCount - old.ttftCount;
  const ttft = recent > 0 ? (last.ttftSum - old.ttftSum) / recent : last.ttftCount ? last.ttftSum / last.ttftCount : NaN;
  $("stat-rps").textContent = rate(rps);
  $("stat-tps").textContent = rate(tps);
  $("stat-ttft").textContent = seconds(ttft);
  $("stat-speed").textContent = last.speedCount ? `${rate(last.speedSum / last.speedCount)} tok/s` : "–";
  $("stat-active").textContent = String(last.active);
  $("stat-queue").textContent = String(last.queue);
  $("stat-total").textContent = String(last.allRequests);
  $("stat-tokens").textContent = `${last.tokensIn} / ${last.tokensOut}`;
  drawChart();
  return samples;
}

function drawChart() {
  const svg = $("chart");
  const ns = "http://www.w3.org/2000/svg";
  const width = 600;
  const height = 120;
  const maxTps = Math.max(1, ...points.map((p) => p.tps || 0));
  const maxRps = Math.max(0.5, ...points.map((p) => p.rps || 0));
  const step = width / (HISTORY - 1);
  const offset = (HISTORY - points.length) * step;
  const coords = (key, max) =>
    points.map((p, i) => `${(offset + i * step).toFixed(1)},${(height - 4 - ((p[key] || 0) / max) * (height - 12)).toFixed(1)}`);
  const shape = (tag, cls, list) => {
    const node = document.createElementNS(ns, tag);
    node.setAttribute("points", list.join(" "));
    node.setAttribute("class", cls);
    return node;
  };
  const tokens = coords("tps", maxTps);
  // tokens as a filled area, requests as a line over it: both stay visible where they coincide
  const area = points.length ? [`${offset.toFixed(1)},${height - 4}`, ...tokens, `${width},${height - 4}`] : [];
  const grid = document.createElementNS(ns, "line");
  for (const [name, value] of Object.entries({ x1: 0, x2: width, y1: height - 4, y2: height - 4, class: "axis" })) {
    grid.setAttribute(name, value);
  }
  svg.replaceChildren(grid, shape("polygon", "tokens", area), shape("polyline", "tokens", tokens), shape("polyline", "requests", coords("rps", maxRps)));
  $("chart-scale").textContent = `· top of chart: ${rate(maxTps)} tokens/s, ${rate(maxRps)} requests/s`;
}

export async function refreshHealth(samples) {
  const health = await call("/health/ready", { accept: [503] });
  const ready = health.status === "ready";
  const badge = $("readiness");
  badge.textContent = ready ? "ready" : health.status || "not ready";
  badge.className = `pill ${ready ? "ok" : "bad"}`;
  const rows = (health.checks || []).map((check) =>
    el("tr", {}, el("td", {}, check.name), el("td", {}, pill(check.ok ? "healthy" : "failing", check.ok ? "ok" : "bad")), el("td", {}, check.detail || "")),
  );
  // Upstream endpoints: in rotation, or sitting out a cooldown after failures in a row.
  for (const s of samples || []) {
    if (s.name !== "dragoman_upstream_endpoint_healthy") continue;
    const healthy = s.value === 1;
    rows.push(
      el("tr", {}, el("td", {}, `endpoint ${s.labels.endpoint} (${s.labels.model})`),
        el("td", {}, pill(healthy ? "in rotation" : "cooling down", healthy ? "ok" : "warn")),
        el("td", {}, healthy ? "" : "skipped after failing requests in a row; retried when the cooldown ends")),
    );
  }
  $("checks-table").tBodies[0].replaceChildren(...rows);
}
