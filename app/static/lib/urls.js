// Every URL the pages ask the server for, built in one place: the API routes (app/*/api.py)
// and the pages a script sends the reader to. Query values that are undefined, null or ""
// are left out; path parts are encoded.

// `path?query` from an object (or URLSearchParams); no "?" when nothing is left.
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

export const api = {
  code: () => "/api/code",
  compareMetrics: (query) => withQuery("/api/compare/metrics", query),
  experiments: () => "/api/experiments",
  experiment: (experimentId) => `/api/experiments/${part(experimentId)}`,
  experimentRuns: (experimentId) => `/api/experiments/${part(experimentId)}/runs`,
  gpus: () => "/api/gpus",
  usage: (query) => withQuery("/api/usage", query),
  runs: (query) => withQuery("/api/runs", query),
  run: (runId) => `/api/runs/${part(runId)}`,
  runCancel: (runId) => `/api/runs/${part(runId)}/cancel`,
  runResume: (runId) => `/api/runs/${part(runId)}/resume`,
  runMetrics: (runId, query) => withQuery(`/api/runs/${part(runId)}/metrics`, query),
  runLogs: (runId, query) => withQuery(`/api/runs/${part(runId)}/logs`, query),
  runEvents: (runId, query) => withQuery(`/api/runs/${part(runId)}/events`, query),
  runCheckpoints: (runId) => `/api/runs/${part(runId)}/checkpoints`,
  runCheckpoint: (runId, name) => `/api/runs/${part(runId)}/checkpoints/${part(name)}`,
  runEnvironment: (runId) => `/api/runs/${part(runId)}/environment`,
  runFiles: (runId) => `/api/runs/${part(runId)}/files`,
  runFile: (runId, path) => `/api/runs/${part(runId)}/files/${filePath(path)}`,
  runImages: (runId) => `/api/runs/${part(runId)}/images`,
  runImage: (runId, imageId) => `/api/runs/${part(runId)}/images/${part(imageId)}`,
  sweeps: (query) => withQuery("/api/sweeps", query),
  sweep: (sweepId) => `/api/sweeps/${part(sweepId)}`,
  sweepCancel: (sweepId) => `/api/sweeps/${part(sweepId)}/cancel`,
  views: (query) => withQuery("/api/views", query),
  view: (viewId) => `/api/views/${part(viewId)}`,
  viewDefault: (viewId) => `/api/views/${part(viewId)}/default`,
};

export const pages = {
  run: (runId) => `/runs/${part(runId)}`,
  sweep: (sweepId) => `/sweeps/${part(sweepId)}`,
  // The ids joined by "," (kept readable: not encoded).
  compare: (runIds) => (runIds.length ? `/compare?runs=${runIds.map(Number).join(",")}` : "/compare"),
};
