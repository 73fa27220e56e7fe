// The front-end's side of the API contract: every URL builder of app/static/lib/urls.js, called
// with sample arguments, names a (method, path) that the server's OpenAPI document has (the
// pages' builders: one of the app's HTML routes), and every call site in app/static and every
// templated delete URL uses a method its builder names. tests/test_js_contract.py runs this
// against the app's own /openapi.json (`node tests/js/contract/check.js routes.json`);
// tests/js/urls_contract.test.js shows it failing on builders and calls that break it.
import {readFileSync, readdirSync} from "node:fs";
import {join, relative} from "node:path";
import {fileURLToPath} from "node:url";

import {api, pages} from "../../../app/static/lib/urls.js";

export const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

// Sample arguments for each builder; a builder without one fails the check (a new builder
// must be added here, and so checked).
export const SAMPLES = {
  api: {
    code: [],
    compareMetrics: [{runs: "1,2", keys: "loss", max_points: 100}],
    experiments: [],
    experiment: [3],
    experimentRuns: [3],
    experimentEvents: [3],
    experimentKeys: [3, {q: "loss", limit: 20}],
    gpus: [],
    gpuEvents: [],
    usage: [{since: "2024-01-01T00:00:00Z", until: "2024-01-02T00:00:00Z"}],
    runs: [{experiment_id: 3, limit: 10}],
    run: [7],
    runCancel: [7],
    runResume: [7],
    runMetrics: [7, {max_points: 10}],
    runLogs: [7, {tail: 10}],
    runEvents: [7, {log_offset: 0}],
    runCheckpoints: [7],
    runCheckpoint: [7, "epoch 1.pt"],
    runEnvironment: [7],
    runFiles: [7],
    runFile: [7, "out/a b.txt"],
    runImages: [7],
    runImage: [7, 3],
    sessions: [],
    sweeps: [{experiment_id: 3}],
    sweep: [5],
    sweepEvents: [5],
    sweepCancel: [5],
    views: [{experiment_id: 3}],
    view: [4],
    viewDefault: [4],
  },
  pages: {run: [7], sweep: [5], compare: [[1, 2]]},
};

/**
 * The routes a URL is checked against: `paths` an OpenAPI document's paths object; `pathParams`
 * per template the parameters that take several segments (Starlette's `{name:path}`, which the
 * document writes as `{name}`); `pages` the HTML routes ({path, methods}).
 * @typedef {{paths: Record<string, Record<string, unknown>>, pathParams?: Record<string, string[]>,
 *            pages?: {path: string, methods: string[]}[]}} Routes
 */

const escape = (text) => text.replace(/[.*+?^$()|[\]\\]/g, "\\$&");
const templateRegex = (template, multi = []) => new RegExp("^" + template.split(/(\{[^}]+\})/).map((piece) => {
  const param = /^\{([^}:]+)(:[^}]*)?\}$/.exec(piece);
  if (!param) return escape(piece);
  return multi.includes(param[1]) || param[2] === ":path" ? ".+" : "[^/]+";
}).join("") + "$");

// The templates of `routes` that `url` (its path part) matches; each with its methods.
const matching = (templates, url) => {
  const path = url.split("?")[0];
  return templates.filter(({regex}) => regex.test(path));
};

const apiTemplates = (routes) => Object.entries(routes.paths).map(([template, ops]) => ({
  template, regex: templateRegex(template, (routes.pathParams || {})[template]),
  methods: Object.keys(ops).map((m) => m.toUpperCase()),
}));
const pageTemplates = (routes) => (routes.pages || []).map(({path, methods}) => ({
  template: path, regex: templateRegex(path), methods: methods.map((m) => m.toUpperCase()),
}));

/**
 * Problems of `builders` (name -> builder with .methods) against `templates`; [] when none.
 * @param {Record<string, Function & {methods?: readonly string[]}>} builders
 * @param {Record<string, unknown[]>} samples
 */
const checkBuilders = (kind, builders, samples, templates) => {
  const problems = [];
  for (const [name, build] of Object.entries(builders)) {
    if (!(name in samples)) { problems.push(`${kind}.${name}: no sample arguments in SAMPLES`); continue; }
    if (!build.methods || !build.methods.length) { problems.push(`${kind}.${name}: names no method`); continue; }
    const url = build(...samples[name]);
    const found = matching(templates, url);
    if (!found.length) { problems.push(`${kind}.${name}: ${url} matches no path of the server`); continue; }
    for (const method of build.methods) {
      if (!found.some((t) => t.methods.includes(method))) {
        problems.push(`${kind}.${name}: ${method} ${url} (${found.map((t) => t.template).join(", ")}) has no ${method}`);
      }
    }
  }
  for (const name of Object.keys(samples)) {
    if (!(name in builders)) problems.push(`${kind}.${name}: a sample for a builder that is gone`);
  }
  return problems;
};

/**
 * Every builder against the routes.
 * @param {Routes} routes
 */
export const checkBuildersAgainst = (routes, builders = {api, pages}, samples = SAMPLES) => [
  ...checkBuilders("api", builders.api, samples.api, apiTemplates(routes)),
  ...checkBuilders("pages", builders.pages, samples.pages, pageTemplates(routes)),
];

// The call sites of the pages' sources: (method, builder) for call/send("M", api.x(...)),
// DELETE for deleteObject(api.x(...)), POST for upload(api.x(...)), GET for an event stream
// (api.xEvents(...): opened by lib/run_stream.js's EventSource).
const SITES = [
  [/\b(?:call|send)\(\s*"([A-Z]+)",\s*api\.(\w+)\(/g, (m) => [m[1], m[2]]],
  [/\bdeleteObject\(\s*api\.(\w+)\(/g, (m) => ["DELETE", m[1]]],
  [/\bupload\(\s*api\.(\w+)\(/g, (m) => ["POST", m[1]]],
  [/\bapi\.(\w+Events)\(/g, (m) => ["GET", m[1]]],
];

/**
 * Problems of the call sites in `sources` ({file: text}) against the builders' methods.
 * @param {Record<string, string>} sources
 */
export const checkCallSites = (sources, builders = api) => {
  const problems = [];
  for (const [file, text] of Object.entries(sources)) {
    for (const [regex, pick] of SITES) {
      for (const m of text.matchAll(regex)) {
        const [method, name] = pick(m);
        const build = builders[name];
        if (!build) problems.push(`${file}: api.${name} is no builder of lib/urls.js`);
        else if (!build.methods.includes(method)) {
          problems.push(`${file}: ${method} on api.${name}, which names only ${build.methods.join(", ")}`);
        }
      }
    }
  }
  return problems;
};

/**
 * The templates' data-delete-url values (`{{ ... }}` standing for an id) against the routes.
 * @param {Record<string, string>} templates  {file: text}
 * @param {Routes} routes
 */
export const checkDeleteUrls = (templates, routes) => {
  const problems = [];
  const known = apiTemplates(routes);
  for (const [file, text] of Object.entries(templates)) {
    for (const m of text.matchAll(/data-delete-url="([^"]+)"/g)) {
      const url = m[1].replace(/\{\{[^}]*\}\}/g, "1");
      if (!matching(known, url).some((t) => t.methods.includes("DELETE"))) {
        problems.push(`${file}: DELETE ${m[1]} is no route of the server`);
      }
    }
  }
  return problems;
};

const filesUnder = (dir, ext) => readdirSync(dir, {withFileTypes: true, recursive: true})
  .filter((e) => e.isFile() && e.name.endsWith(ext))
  .map((e) => join(e.parentPath ?? e.path, e.name));
const read = (files) => Object.fromEntries(files.map((f) => [relative(ROOT, f), readFileSync(f, "utf8")]));

/**
 * Everything above, on this tree, against `routes`.
 * @param {Routes} routes
 */
export const checkTree = (routes) => [
  ...checkBuildersAgainst(routes),
  ...checkCallSites(read(filesUnder(join(ROOT, "app/static"), ".js"))),
  ...checkDeleteUrls(read(filesUnder(join(ROOT, "templates"), ".html")), routes),
];

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const routes = JSON.parse(readFileSync(process.argv[2], "utf8"));
  const problems = checkTree(routes);
  for (const p of problems) console.error(p);
  console.log(`${problems.length} problem(s)`);
  process.exitCode = problems.length ? 1 : 0;
}
