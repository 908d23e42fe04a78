// The playground: chats through the gateway's own chat endpoints, streaming, in either
// dialect. The conversation lives in this tab only. After each turn the page shows it
// in both dialects (turn.js); Stop aborts the request, which closes the connection,
// and the gateway cancels the generation as for any client that goes away.

import { call, errorText } from "./api.js";
import { showTurn } from "./turn.js";
import { $, el, rate } from "./util.js";

let history = [];
let controller = null;

export function setModels(names) {
  const select = $("chat-model");
  const current = select.value;
  select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  if (names.includes(current)) select.value = current;
}

export function setupPlayground() {
  $("chat-form").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("chat-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      send();
    }
  });
  $("chat-stop").addEventListener("click", () => controller && controller.abort());
  $("chat-clear").addEventListener("click", () => {
    history = [];
    $("transcript").replaceChildren();
    $("chat-status").textContent = "";
  });
}

function requestFor(dialect, model, messages) {
  const temperature = Number($("chat-temperature").value);
  const maxTokens = Number($("chat-max-tokens").value);
  if (dialect === "openai") {
    return { path: "/v1/chat/completions", body: {
      model, messages, stream: true, stream_options: { include_usage: true }, temperature, max_tokens: maxTokens,
    } };
  }
  return { path: "/api/chat", body: { model, messages, stream: true, options: { temperature, num_predict: maxTokens } } };
}

// One parsed line of the stream: text to show, and how the reply ended (if it did).
function readLine(dialect, line) {
  if (dialect === "openai") {
    if (!line.startsWith("data:")) return {};
    const payload = line.slice(5).trim();
    if (payload === "[DONE]") return { done: true };
    const chunk = JSON.parse(payload);
    if (chunk.error) return { error: errorText(chunk) };
    const choice = (chunk.choices || [])[0];
    return {
      text: choice && choice.delta ? choice.delta.content || "" : "",
      reason: choice ? choice.finish_reason : null,
      tokens: chunk.usage ? chunk.usage.completion_tokens : undefined,
    };
  }
  if (!line.trim()) return {};
  const chunk = JSON.parse(line);
  if (chunk.error) return { error: errorText(chunk) };
  return {
    text: chunk.message ? chunk.message.content || "" : "",
    reason: chunk.done ? chunk.done_reason || "stop" : null,
    tokens: chunk.done ? chunk.eval_count : undefined,
    done: Boolean(chunk.done),
  };
}

async function send() {
  const input = $("chat-input");
  const text = input.value.trim();
  const model = $("chat-model").value;
  if (!text || !model || controller) return;
  const dialect = $("chat-dialect").value;
  const system = $("chat-system").value.trim();
  const messages = [...(system ? [{ role: "system", content: system }] : []), ...history, { role: "user", content: text }];
  const { path, body } = requestFor(dialect, model, messages);
  input.value = "";
  $("transcript").append(el("div", { class: "msg user" }, el("span", { class: "who" }, "you"), el("p", {}, text)));
  const answer = el("p", { class: "answer" });
  $("transcript").append(el("div", { class: "msg assistant" }, el("span", { class: "who" }, model), answer));
  const status = $("chat-status");
  status.textContent = `waiting for ${model}…`;
  controller = new AbortController();
  $("chat-stop").disabled = false;
  $("chat-send").disabled = true;
  let raw = "";
  let content = "";
  let ended = null;
  let tokens;
  const started = performance.now();
  let firstAt = null;
  try {
    const response = await call(path, { method: "POST", body, signal: controller.signal, raw: true });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const chunk = decoder.decode(value, { stream: true });
      raw += chunk;
      buffer += chunk;
      const lines = buffer.split("\n");
      buffer = lines.pop();
      for (const line of lines) {
        const part = readLine(dialect, line);
        if (part.error) ended = `error: ${part.error}`;
        if (part.text) {
          firstAt = firstAt || performance.now();
          content += part.text;
          answer.textContent = content;
          status.textContent = `streaming · ${content.length} characters`;
        }
        if (part.reason) ended = ended || part.reason;
        if (part.tokens !== undefined) tokens = part.tokens;
      }
    }
    const took = (performance.now() - (firstAt || started)) / 1000;
    const speed = tokens && took > 0 ? ` · ${rate(tokens / took)} tokens/s` : "";
    status.textContent = `done (${ended || "stream ended"})${tokens !== undefined ? ` · ${tokens} tokens` : ""}${speed}`;
  } catch (err) {
    if (err.name === "AbortError") {
      status.textContent = `stopped after ${content.length} characters`;
      answer.classList.add("stopped");
    } else {
      status.textContent = err.message;
      answer.classList.add("error");
      if (!content) answer.textContent = err.message;
    }
  } finally {
    controller = null;
    $("chat-stop").disabled = true;
    $("chat-send").disabled = false;
  }
  history.push({ role: "user", content: text });
  if (content) history.push({ role: "assistant", content });
  if (raw) await showTurn(dialect, body, raw);
  document.dispatchEvent(new CustomEvent("dragoman:changed"));
}
