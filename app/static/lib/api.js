// JSON calls to the API with the session cookie and the CSRF header. Never throws for HTTP
// errors: callers show the body's message (FastAPI's {"detail": ...}) where the user can act.
import {api} from "./urls.js";

export const csrf = () =>
  /** @type {HTMLMetaElement | null} */ (document.querySelector('meta[name="csrf-token"]'))?.content || "";

// The one place the pages call fetch (eslint.config.js refuses it elsewhere): the session
// cookie, the CSRF header, and a JSON body when one is given. Resolves to the Response and
// rejects as fetch does; for an answer the caller reads itself (the log's text with its
// X-Log-Size header, the run page's history started before the page is parsed). Most callers
// want `call`.
/**
 * @param {string} method
 * @param {string} path  from lib/urls.js
 * @param {unknown} [body]  sent as JSON when given
 * @returns {Promise<Response>}
 */
export const send = (method, path, body) => {
  /** @type {Record<string, string>} */
  const headers = {"X-CSRF-Token": csrf()};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(path, {method, headers, credentials: "same-origin",
                      body: body === undefined ? undefined : JSON.stringify(body)});
};

// Resolves to {ok, status, body}; status 0 when the server could not be reached, or went away
// while it sent the answer (a body cut off rejects as fetch itself does: a server killed
// mid-answer must leave the page's "connection lost", not an uncaught error).
/**
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<{ok: boolean, status: number, body: any}>}
 */
export const call = async (method, path, body) => {
  let text, response;
  try {
    response = await send(method, path, body);
    text = await response.text();
  } catch (err) {
    return {ok: false, status: 0, body: {detail: "The server cannot be reached: " + err}};
  }
  let parsed = text;
  try { parsed = text ? JSON.parse(text) : null; } catch { /* plain text */ }
  return {ok: response.ok, status: response.status, body: parsed};
};

// The experiment's metric keys whose name holds `q` (any case), in name order, at most `limit`
// (GET /api/experiments/{id}/keys, app/metrics/key_search.py): the pickers' search as the
// reader types (lib/key_search.js), instead of every key in the page (issue 43). Resolves to
// {keys, more} (more: others match too), or {keys: [], more: false, error} when refused or
// not answered.
/**
 * @param {string | number} experimentId
 * @param {string} q
 * @param {number} [limit]
 * @returns {Promise<{keys: string[], more: boolean, error?: string}>}
 */
export const searchKeys = async (experimentId, q, limit = 50) => {
  const r = await call("GET", api.experimentKeys(experimentId, {q, limit}));
  if (!r.ok || !r.body || !Array.isArray(r.body.keys)) return {keys: [], more: false, error: errorText(r.body)};
  return {keys: r.body.keys, more: Boolean(r.body.more)};
};

// A readable message from an API error body.
export const errorText = (body) => {
  if (!body) return "Something went wrong.";
  if (typeof body.detail === "string") return body.detail;
  if (Array.isArray(body.detail)) return body.detail.map((e) => `${e.loc.join(".")}: ${e.msg}`).join("; ");
  return typeof body === "string" ? body : JSON.stringify(body);
};

// What a failed action says, on every page alike (lib/dom.js showFailure puts it next to the
// control that took it): the server's own message for a refusal (403), a conflict (409) or a
// refused value (422); the network's error when the server could not be reached (status 0);
// the status for a 5xx whose body is not the server's JSON (a proxy's HTML page).
export const failureText = (r) => {
  if (r.status >= 500 && (r.body === null || typeof r.body !== "object")) {
    return `the server failed (HTTP ${r.status})`;
  }
  return errorText(r.body);
};

// Whether an answer means the server did not answer for itself: unreachable (status 0) or
// failing behind a proxy (5xx). A 4xx is the server talking.
export const serverDown = (r) => r.status === 0 || r.status >= 500;

// DELETE `url` with the CSRF header; resolves to {ok, freed (bytes), error (text or null)}.
// The one DELETE call: the delete buttons and the runs table's "Delete" both.
export const deleteObject = async (url) => {
  let response;
  try {
    response = await send("DELETE", url);
  } catch (err) {
    return {ok: false, freed: 0, error: `the server cannot be reached (${err})`};
  }
  if (response.status !== 204) {
    let body = null;
    try { body = await response.json(); } catch { /* not JSON */ }
    return {ok: false, freed: 0, error: failureText({status: response.status, body})};
  }
  return {ok: true, freed: Number(response.headers.get("X-Freed-Bytes") || 0), error: null};
};

// POST `blob` as the multipart field "file" with upload progress (fetch reports none: an
// XMLHttpRequest, the one in the pages); resolves to {ok, status, body} like `call`.
/**
 * @param {string} path
 * @param {Blob} blob
 * @param {string} filename
 * @param {(loaded: number, total: number) => void} onProgress
 * @returns {Promise<{ok: boolean, status: number, body: any}>}
 */
export const upload = (path, blob, filename, onProgress) => new Promise((resolve) => {
  const xhr = new XMLHttpRequest();
  xhr.open("POST", path);
  xhr.setRequestHeader("X-CSRF-Token", csrf());
  xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); };
  xhr.onload = () => {
    let body = xhr.responseText;
    try { body = body ? JSON.parse(body) : null; } catch { /* plain text */ }
    resolve({ok: xhr.status >= 200 && xhr.status < 300, status: xhr.status, body});
  };
  xhr.onerror = () => resolve({ok: false, status: 0, body: {detail: "The server cannot be reached."}});
  const data = new FormData();
  data.append("file", blob, filename);
  xhr.send(data);
});
