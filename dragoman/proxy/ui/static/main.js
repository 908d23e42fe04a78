// Start-up: ask for the API key when the server needs one (nothing else is requested
// until a key works), then load the config view and keep the live parts fresh.

import { ApiError, auth, call } from "./api.js";
import { renderConfig } from "./config.js";
import { refreshHealth, refreshMetrics } from "./health.js";
import { chatModelNames, refreshModels, refreshRunning, setConfig, tick } from "./models.js";
import { setModels, setupPlayground } from "./playground.js";
import { $ } from "./util.js";

const FAST = 2000; // metrics and /api/ps
const SLOW = 10000; // /health/ready probes upstreams: less often
const keysRequired = document.body.dataset.keysRequired === "true";
const timers = [];
let samples = [];

function showKeyPrompt(message) {
  for (const timer of timers.splice(0)) clearInterval(timer);
  $("app").hidden = true;
  $("forget-key").hidden = true;
  $("key-prompt").hidden = false;
  $("key-message").textContent = message || "";
  $("readiness").textContent = "locked";
  $("readiness").className = "pill muted";
  $("key-input").focus();
}

async function start() {
  const view = await call("/ui/api/config");
  $("key-prompt").hidden = true;
  $("app").hidden = false;
  $("forget-key").hidden = !keysRequired;
  setConfig(view);
  renderConfig(view);
  await refreshModels();
  setModels(chatModelNames());
  samples = await refreshMetrics();
  await refreshHealth(samples);
  timers.push(setInterval(() => guarded(async () => { samples = await refreshMetrics(); await refreshRunning(); }), FAST));
  timers.push(setInterval(() => guarded(() => refreshHealth(samples)), SLOW));
  timers.push(setInterval(tick, 1000));
}

async function guarded(work) {
  try {
    await work();
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) console.warn("refresh failed:", err.message);
  }
}

// A chat ended or a model was loaded or unloaded: show its effect now, not at the next tick.
document.addEventListener("dragoman:changed", () => guarded(async () => {
  samples = await refreshMetrics();
  await refreshRunning();
  await refreshHealth(samples);
}));

document.addEventListener("dragoman:unauthorized", () => {
  auth.forget();
  showKeyPrompt("The server refused that API key. Enter a valid one.");
});

$("key-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = $("key-input");
  const key = input.value.trim();
  input.value = ""; // the key is not kept in the page, only in this tab's session storage
  if (!key) return;
  auth.set(key);
  $("key-message").textContent = "checking…";
  try {
    await start();
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) $("key-message").textContent = err.message;
  }
});

$("forget-key").addEventListener("click", () => {
  auth.forget();
  showKeyPrompt("Key forgotten.");
});

$("refresh-models").addEventListener("click", () => guarded(async () => {
  await refreshModels();
  setModels(chatModelNames());
}));

setupPlayground();
if (keysRequired && !auth.key) showKeyPrompt();
else start().catch((err) => {
  if (!(err instanceof ApiError && err.status === 401)) $("readiness").textContent = `error: ${err.message}`;
});
