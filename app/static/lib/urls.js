// Every URL the pages ask the server for, built in one place: the API routes (app/*/api.py)
// and the pages a script sends the reader to. Query values that are undefined, null or ""
// are left out; path parts are encoded.

/** @typedef {Record<string, any> | URLSearchParams} Query */

// `path?query` from an object (or URLSearchParams); no "?" when nothing is left.
/** @param {string} path @param {Query} [query] */
export const withQuery = (path, query) => {
  const params = new URLSearchParams();
  const entries = query instanceof URLSearchParams ? query.entries() : Object.entries(query || {});
  for (const [key, value] of entries) {
    if (value === undefined || value === null || value === "") continue;
    for (const v of Array.isArray(value) ? value : [value]) params.append(key, String(v));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
};

const part = (value) => encodeURIComponent(String(value));
// A file path under a run's folder: each segment encoded, the slashes kept.
const filePath = (path) => path.split("/").map(encodeURIComponent).join("/");

// A builder with the methods the pages use on its path: tests/js/urls_contract.test.js and
// tests/test_js_contract.py check each (method, path) against the server's /openapi.json, and
// that every call site in app/static uses a method its builder names.
/**
 * @template {any[]} A
 * @param {string[]} methods
 * @param {(...args: A) => string} build
 * @returns {((...args: A) => string) & {methods: readonly string[]}}
 */
const route = (methods, build) => Object.assign(build, {methods: Object.freeze(methods)});
const GET = ["GET"];

export const api = {
  code: route(["POST"], () => "/api/code"),
  compareMetrics: route(GET, /** @param {Query} [query] */ (query) => withQuery("/api/compare/metrics", query)),
  experiments: route(["POST"], () => "/api/experiments"),
  experiment: route(["PATCH", "DELETE"], (experimentId) => `/api/experiments/${part(experimentId)}`),
  experimentRuns: route(["POST"], (experimentId) => `/api/experiments/${part(experimentId)}/runs`),
  experimentEvents: route(GET, (experimentId) => `/api/experiments/${part(experimentId)}/events`),
  experimentKeys: route(GET, (experimentId, query) => withQuery(`/api/experiments/${part(experimentId)}/keys`, query)),
  gpus: route(GET, () => "/api/gpus"),
  gpuEvents: route(GET, () => "/api/gpus/events"),
  usage: route(GET, /** @param {Query} [query] */ (query) => withQuery("/api/usage", query)),
  runs: route(GET, /** @param {Query} [query] */ (query) => withQuery("/api/runs", query)),
  run: route(["GET", "PATCH", "DELETE"], (runId) => `/api/runs/${part(runId)}`),
  runCancel: route(["POST"], (runId) => `/api/runs/${part(runId)}/cancel`),
  runResume: route(["POST"], (runId) => `/api/runs/${part(runId)}/resume`),
  runMetrics: route(GET, (runId, query) => withQuery(`/api/runs/${part(runId)}/metrics`, query)),
  runLogs: route(GET, (runId, query) => withQuery(`/api/runs/${part(runId)}/logs`, query)),
  runEvents: route(GET, (runId, query) => withQuery(`/api/runs/${part(runId)}/events`, query)),
  runCheckpoints: route(GET, (runId) => `/api/runs/${part(runId)}/checkpoints`),
  runCheckpoint: route(GET, (runId, name) => `/api/runs/${part(runId)}/checkpoints/${part(name)}`),
  runEnvironment: route(GET, (runId) => `/api/runs/${part(runId)}/environment`),
  runFiles: route(GET, (runId) => `/api/runs/${part(runId)}/files`),
  runFile: route(GET, (runId, path) => `/api/runs/${part(runId)}/files/${filePath(path)}`),
  runImages: route(GET, (runId) => `/api/runs/${part(runId)}/images`),
  runImage: route(GET, (runId, imageId) => `/api/runs/${part(runId)}/images/${part(imageId)}`),
  sessions: route(["POST"], () => "/api/sessions"),
  sweeps: route(["GET", "POST"], /** @param {Query} [query] */ (query) => withQuery("/api/sweeps", query)),
  sweep: route(GET, (sweepId) => `/api/sweeps/${part(sweepId)}`),
  sweepEvents: route(GET, (sweepId) => `/api/sweeps/${part(sweepId)}/events`),
  sweepCancel: route(["POST"], (sweepId) => `/api/sweeps/${part(sweepId)}/cancel`),
  views: route(["GET", "POST"], /** @param {Query} [query] */ (query) => withQuery("/api/views", query)),
  view: route(["GET", "DELETE"], (viewId) => `/api/views/${part(viewId)}`),
  viewDefault: route(["PUT"], (viewId) => `/api/views/${part(viewId)}/default`),
};

// The pages a script sends the reader to (HTML routes: not in /openapi.json; the contract test
// checks them against the app's routes).
export const pages = {
  run: route(GET, (runId) => `/runs/${part(runId)}`),
  sweep: route(GET, (sweepId) => `/sweeps/${part(sweepId)}`),
  // The ids joined by "," (kept readable: not encoded).
  compare: route(GET, (runIds) => (runIds.length ? `/compare?runs=${runIds.map(Number).join(",")}` : "/compare")),
};
