// The contract checker (tests/js/contract/check.js) refuses what breaks the contract: a builder
// whose path or method the server does not have, a builder with no sample (so unchecked), a
// call site using a method its builder does not name, a delete URL of no route. Its run against
// the app's real /openapi.json: tests/test_js_contract.py.
import assert from "node:assert/strict";
import {test} from "node:test";

import * as urls from "../../app/static/lib/urls.js";
import {SAMPLES, checkBuildersAgainst, checkCallSites, checkDeleteUrls} from "./contract/check.js";

const route = (methods, build) => Object.assign(build, {methods});
const ROUTES = {
  paths: {
    "/api/runs/{run_id}": {get: {}, patch: {}},
    "/api/runs/{run_id}/files/{path}": {get: {}},
  },
  pathParams: {"/api/runs/{run_id}/files/{path}": ["path"]},
  pages: [{path: "/runs/{run_id}", methods: ["GET"]}],
};
const builders = (api) => ({api, pages: {run: route(["GET"], (id) => `/runs/${id}`)}});
const samples = (api) => ({api, pages: {run: [7]}});

test("builders whose path and methods the server has pass", () => {
  const api = {run: route(["GET", "PATCH"], (id) => `/api/runs/${id}`),
               runFile: route(["GET"], (id, p) => `/api/runs/${id}/files/${p}`)};
  assert.deepEqual(checkBuildersAgainst(ROUTES, builders(api), samples({run: [7], runFile: [7, "a/b.txt"]})), []);
});

test("a builder naming a path the server does not have fails", () => {
  const api = {run: route(["GET"], (id) => `/api/run/${id}`)};  // "run", not "runs"
  assert.deepEqual(checkBuildersAgainst(ROUTES, builders(api), samples({run: [7]})),
                   ["api.run: /api/run/7 matches no path of the server"]);
});

test("a builder naming a method its path does not have fails", () => {
  const api = {run: route(["GET", "DELETE"], (id) => `/api/runs/${id}`)};
  const [problem, ...rest] = checkBuildersAgainst(ROUTES, builders(api), samples({run: [7]}));
  assert.match(problem, /^api\.run: DELETE \/api\/runs\/7 .* has no DELETE$/);
  assert.deepEqual(rest, []);
});

test("a segment parameter does not swallow a slash; a {path} one does", () => {
  const api = {run: route(["GET"], (id) => `/api/runs/${id}`)};
  assert.equal(checkBuildersAgainst(ROUTES, builders(api), samples({run: ["7/x"]})).length, 1);
});

test("a builder without a sample fails (so no builder goes unchecked)", () => {
  const api = {run: route(["GET"], (id) => `/api/runs/${id}`), extra: route(["GET"], () => "/api/extra")};
  assert.deepEqual(checkBuildersAgainst(ROUTES, builders(api), samples({run: [7]})),
                   ["api.extra: no sample arguments in SAMPLES"]);
});

test("every builder of lib/urls.js has its sample and names a method; urls.js exports no other set", () => {
  assert.deepEqual(Object.keys(urls).sort(), ["api", "pages", "withQuery"]);
  for (const kind of ["api", "pages"]) {
    assert.deepEqual(Object.keys(urls[kind]).sort(), Object.keys(SAMPLES[kind]).sort(), kind);
    for (const [name, build] of Object.entries(urls[kind])) assert.ok(build.methods.length, name);
  }
});

test("a call site using a method its builder does not name fails", () => {
  const sources = {
    "ok.js": 'call("PATCH", api.run(1), {tags}); deleteObject(api.run(id)); send("GET", api.run(2));',
    "bad.js": 'await call("POST", api.run(run.id));\nawait call("GET", api.nothing());',
  };
  assert.deepEqual(checkCallSites(sources), [
    "bad.js: POST on api.run, which names only GET, PATCH, DELETE",
    "bad.js: api.nothing is no builder of lib/urls.js",
  ]);
});

test("a template's delete URL of no route fails", () => {
  const routes = {paths: {"/api/runs/{run_id}": {delete: {}}}};
  assert.deepEqual(checkDeleteUrls({
    "run.html": '<button data-delete-url="/api/runs/{{ run.id }}">',
    "old.html": '<button data-delete-url="/api/run/{{ run.id }}">',
  }, routes), ["old.html: DELETE /api/run/{{ run.id }} is no route of the server"]);
});
