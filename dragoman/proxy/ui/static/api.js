// Every request the page makes goes through call(): the same public endpoints any
// client uses, with the API key (when one was entered) as a bearer token.

const KEY = "dragoman.apiKey";

export const auth = {
  get key() { return sessionStorage.getItem(KEY) || ""; },
  set(key) { sessionStorage.setItem(KEY, key); },
  forget() { sessionStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// options: method, body (object or string), signal, raw (return the Response),
// accept (extra statuses that still carry a body worth reading, e.g. 503 from /health/ready)
export async function call(path, { method = "GET", body, signal, raw = false, accept = [] } = {}) {
  const headers = {};
  if (auth.key) headers.Authorization = `Bearer ${auth.key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    signal,
    cache: "no-store",
    credentials: "omit",
  });
  if (response.status === 401) document.dispatchEvent(new CustomEvent("dragoman:unauthorized"));
  if (!response.ok && !accept.includes(response.status)) {
    throw new ApiError(response.status, await errorMessage(response));
  }
  if (raw) return response;
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
}

// Both dialects' error bodies: Ollama's {"error": "…"} and OpenAI's {"error": {"message": …}}.
export function errorText(payload) {
  const error = payload && payload.error;
  if (!error) return "";
  return typeof error === "string" ? error : error.message || JSON.stringify(error);
}

async function errorMessage(response) {
  const text = await response.text();
  try {
    return `${response.status}: ${errorText(JSON.parse(text)) || text}`;
  } catch {
    return `${response.status}: ${text || response.statusText}`;
  }
}
