// The API and page URLs the front-end asks for (app/static/lib/urls.js).
import assert from "node:assert/strict";
import {test} from "node:test";

import {api, pages, withQuery} from "../../app/static/lib/urls.js";

test("query values that are empty are left out; lists repeat their key", () => {
  assert.equal(withQuery("/api/runs", {}), "/api/runs");
  assert.equal(withQuery("/api/runs", {a: "", b: null, c: undefined, d: 0}), "/api/runs?d=0");
  assert.equal(withQuery("/api/runs", {status: ["queued", "running"]}), "/api/runs?status=queued&status=running");
  assert.equal(withQuery("/x", new URLSearchParams({q: "a b&c"})), "/x?q=a+b%26c");
});

test("run routes", () => {
  assert.equal(api.run(7), "/api/runs/7");
  assert.equal(api.runCancel(7), "/api/runs/7/cancel");
  assert.equal(api.runResume(7), "/api/runs/7/resume");
  assert.equal(api.runMetrics(7, {max_points: 4000, with_time: "true"}), "/api/runs/7/metrics?max_points=4000&with_time=true");
  assert.equal(api.runLogs(7, {tail: 10, rank: null}), "/api/runs/7/logs?tail=10");
  assert.equal(api.runEvents(7, {log_offset: 0, after: '{"a":1}'}), "/api/runs/7/events?log_offset=0&after=%7B%22a%22%3A1%7D");
  assert.equal(api.runCheckpoints(7), "/api/runs/7/checkpoints");
  assert.equal(api.runCheckpoint(7, "epoch 1.pt"), "/api/runs/7/checkpoints/epoch%201.pt");
  assert.equal(api.runEnvironment(7), "/api/runs/7/environment");
  assert.equal(api.runFiles(7), "/api/runs/7/files");
  assert.equal(api.runFile(7, "out/a b#.txt"), "/api/runs/7/files/out/a%20b%23.txt");
  assert.equal(api.runImages(7), "/api/runs/7/images");
  assert.equal(api.runImage(7, 3), "/api/runs/7/images/3");
});

test("lists, experiments, sweeps and the rest", () => {
  assert.equal(api.runs({experiment_id: 3, sort: "-id", limit: 100}), "/api/runs?experiment_id=3&sort=-id&limit=100");
  assert.equal(api.experiments(), "/api/experiments");
  assert.equal(api.experimentRuns(3), "/api/experiments/3/runs");
  assert.equal(api.sweeps(), "/api/sweeps");
  assert.equal(api.sweeps({experiment_id: 3}), "/api/sweeps?experiment_id=3");
  assert.equal(api.sweep(4), "/api/sweeps/4");
  assert.equal(api.sweepCancel(4), "/api/sweeps/4/cancel");
  assert.equal(api.compareMetrics({runs: "1,2", keys: "loss"}), "/api/compare/metrics?runs=1%2C2&keys=loss");
  assert.equal(api.gpus(), "/api/gpus");
  assert.equal(api.usage({since: "a", until: "b", owner: ""}), "/api/usage?since=a&until=b");
  assert.equal(api.code(), "/api/code");
});

test("pages", () => {
  assert.equal(pages.run(5), "/runs/5");
  assert.equal(pages.sweep(2), "/sweeps/2");
  assert.equal(pages.compare([1, 2]), "/compare?runs=1,2");
  assert.equal(pages.compare([]), "/compare");
});
