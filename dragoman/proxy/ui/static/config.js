// The config as `dragoman config check` prints it, and each entry's settings with
// secrets already masked by the server (the keys themselves never reach the page).

import { $, el, json, seconds } from "./util.js";

export function renderConfig(view) {
  $("config-check").textContent = view.check.join("\n");
  const rows = view.entries.map((e) =>
    el("tr", {},
      el("td", { class: "name" }, e.name, e.description ? el("small", {}, ` ${e.description}`) : null),
      el("td", {}, e.backend),
      el("td", {}, e.keep_alive < 0 ? "forever" : seconds(e.keep_alive)),
      el("td", {}, el("pre", {}, json(e.defaults))),
      el("td", {}, el("pre", {}, json(e.settings)))),
  );
  $("config-table").tBodies[0].replaceChildren(...rows);
  $("config-server").textContent = json(view.server);
}
