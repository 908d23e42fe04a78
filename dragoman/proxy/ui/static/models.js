// The models table: every config entry, with what clients see of it. Names come from
// /api/tags, capabilities and context from /api/show, the loaded state from /api/ps;
// load and unload are Ollama's own calls (/api/chat with no messages, keep_alive 0
// to unload), so the buttons do exactly what a client would.

import { call } from "./api.js";
import { $, bytes, el, globMatches, pill, seconds } from "./util.js";

const NEVER_YEAR = 2300; // Ollama writes "never expires" as a date in 2318
let view = null; // the config view (/ui/api/config)
let names = []; // [{name, entry}] one row per servable name
const shown = new Map(); // name -> /api/show answer (or an error)
let running = new Map(); // name -> /api/ps entry
const busy = new Set();

export function setConfig(configView) {
  view = configView;
}

export async function refreshModels() {
  const tags = await call("/api/tags");
  const aliases = new Set(view.entries.flatMap((e) => e.aliases));
  const rows = [];
  for (const entry of view.entries) {
    if (entry.match === "exact") rows.push({ name: entry.name, entry });
  }
  for (const tag of tags.models) {
    if (aliases.has(tag.name) || rows.some((r) => r.name === tag.name)) continue;
    const entry = view.entries.find((e) => e.match === "pattern" && globMatches(e.name, tag.name));
    if (entry) rows.push({ name: tag.name, entry, discovered: true });
  }
  for (const entry of view.entries) {
    if (entry.match === "pattern" && !rows.some((r) => r.entry === entry)) rows.push({ name: entry.name, entry, pattern: true });
  }
  names = rows;
  await Promise.all(rows.filter((r) => !r.pattern && !shown.has(r.name)).map(async (r) => {
    try {
      shown.set(r.name, await call("/api/show", { method: "POST", body: { model: r.name } }));
    } catch (err) {
      shown.set(r.name, { error: err.message });
    }
  }));
  await refreshRunning();
}

export async function refreshRunning() {
  const ps = await call("/api/ps");
  running = new Map(ps.models.map((m) => [m.name, m]));
  render();
}

// What the playground offers: models that chat (an embedding model has no "completion";
// one whose /api/show failed is offered, and its error will say why).
export function chatModelNames() {
  const chats = (r) => { const s = shown.get(r.name); return !s || s.error || (s.capabilities || []).includes("completion"); };
  return names.filter((r) => !r.pattern && chats(r)).map((r) => r.name);
}

export function tick() {
  // expires_at counts down between two /api/ps polls
  for (const cell of document.querySelectorAll("td.expires[data-at]")) {
    cell.textContent = expiresIn(cell.dataset.at);
  }
}

function render() {
  const body = $("models-table").tBodies[0];
  body.replaceChildren(...names.map(row));
  $("models-message").textContent = names.length ? "" : "No model entries in the config.";
}

function row(r) {
  const { entry } = r;
  const show = shown.get(r.name) || {};
  const loaded = running.get(r.name);
  const upstream = entry.answers_from.some((a) => a.includes("://"));
  let state;
  if (r.pattern) state = pill("pattern", "muted");
  else if (loaded) state = pill("loaded", "ok");
  else if (busy.has(r.name)) state = pill("working…", "warn");
  else state = pill(upstream ? "upstream" : "not loaded", "muted");
  const caps = show.error ? el("span", { class: "error" }, show.error) : (show.capabilities || []).join(", ");
  const context = entry.context_length || contextOf(show) || "–";
  const name = el("td", { class: "name" }, r.name, r.discovered ? el("small", {}, " discovered") : null);
  return el("tr", { dataset: { model: r.name, state: loaded ? "loaded" : "not-loaded" } },
    name,
    el("td", {}, r.pattern || r.discovered ? "" : entry.aliases.join(", ")),
    el("td", {}, entry.backend),
    el("td", { class: "where" }, entry.answers_from.join("\n") || "–"),
    el("td", {}, r.pattern ? "" : caps),
    el("td", {}, String(context)),
    el("td", { class: "state" }, state),
    el("td", { class: "engine" }, loaded ? engine(loaded.details) : ""),
    el("td", {}, loaded ? bytes(loaded.size) + (loaded.size_vram ? ` (${bytes(loaded.size_vram)} on GPU)` : "") : ""),
    loaded ? el("td", { class: "expires", dataset: { at: loaded.expires_at } }, expiresIn(loaded.expires_at)) : el("td", {}, ""),
    el("td", { class: "buttons" }, r.pattern ? "" : [
      el("button", { type: "button", class: "load", disabled: busy.has(r.name), onclick: () => loadOrUnload(r.name, true) }, "Load"),
      el("button", { type: "button", class: "unload", disabled: busy.has(r.name), onclick: () => loadOrUnload(r.name, false) }, "Unload"),
    ]),
  );
}

async function loadOrUnload(name, load) {
  busy.add(name);
  render();
  const body = load ? { model: name, messages: [] } : { model: name, messages: [], keep_alive: 0 };
  try {
    await call("/api/chat", { method: "POST", body });
    $("models-message").textContent = `${name}: ${load ? "loaded" : "unloaded"}`;
  } catch (err) {
    $("models-message").textContent = `${name}: ${load ? "load" : "unload"} failed: ${err.message}`;
  } finally {
    busy.delete(name);
  }
  await refreshRunning();
  document.dispatchEvent(new CustomEvent("dragoman:changed"));
}

// What runs a loaded local model (/api/ps details.engine), and why when it is the
// Generator (no batching of requests): marked, not hidden behind a green "loaded".
function engine(details) {
  if (!details.engine) return "";
  if (!details.engine_reason) return details.engine;
  return [pill(details.engine, "warn"), el("small", { class: "reason" }, details.engine_reason)];
}

function contextOf(show) {
  const info = show.model_info || {};
  const key = Object.keys(info).find((k) => k.endsWith(".context_length"));
  return key ? info[key] : null;
}

function expiresIn(at) {
  const when = new Date(at);
  if (when.getUTCFullYear() >= NEVER_YEAR) return "never";
  const left = (when.getTime() - Date.now()) / 1000;
  return left > 0 ? `in ${seconds(left)}` : "now";
}
