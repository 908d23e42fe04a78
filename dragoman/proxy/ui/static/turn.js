// The last turn in both dialects: the page posts what it sent and the raw stream it
// read back; the gateway's pure adapters say what the other dialect makes of it.

import { call } from "./api.js";
import { $, json } from "./util.js";

export async function showTurn(dialect, request, response) {
  const message = $("turn-message");
  try {
    const view = await call("/ui/api/turn", { method: "POST", body: { dialect, request, response } });
    for (const side of ["openai", "ollama"]) {
      const part = view[side];
      const name = side === "openai" ? "OpenAI" : "Ollama";
      $(`turn-${side}-title`).textContent = `${name} · ${part.translated ? "translated by the gateway" : "as sent and received"}`;
      $(`turn-${side}-request`).textContent = json(part.request);
      $(`turn-${side}-response`).textContent = part.response;
    }
    $("turn-canonical").textContent = json(view.canonical);
    $("turn-reply").textContent = json(view.reply);
    message.textContent = view.dropped.length ? `OpenAI has no field for: ${view.dropped.join(", ")} (dropped when sent that way).` : "";
    $("turn-view").hidden = false;
  } catch (err) {
    message.textContent = `Could not show the turn: ${err.message}`;
  }
}
