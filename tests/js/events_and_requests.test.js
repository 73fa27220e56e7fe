// The two rules eslint.config.js keeps for app/static: every request goes through lib/api.js
// (no fetch elsewhere, however it is reached), and every page event is named in lib/events.js
// (no "ty:..." string elsewhere). Each rule is shown refusing the change that would break it,
// linted as if it were a page module, and lib/events.js is checked for what it promises.
import assert from "node:assert/strict";
import {test} from "node:test";

import {ESLint} from "eslint";

import * as events from "../../app/static/lib/events.js";

const eslint = new ESLint();
const problems = async (code, filePath = "app/static/some_page.js") => {
  const [result] = await eslint.lintText(code, {filePath});
  return result.messages.map((m) => `${m.ruleId}: ${m.message}`);
};

test("a raw fetch in a page module is refused, however it is reached", async () => {
  for (const code of ['fetch("/api/runs");', 'window.fetch("/api/runs");',
                      'globalThis.fetch("/api/runs");', "const f = fetch; f('/api/runs');",
                      'const xhr = new XMLHttpRequest(); xhr.open("POST", "/api/code");']) {
    const found = await problems(code);
    assert.ok(found.some((m) => m.includes("lib/api.js")), `${code}: ${found}`);
  }
  assert.deepEqual(await problems('import {call} from "./lib/api.js";\ncall("GET", "/api/runs");'), []);
});

test("lib/api.js itself may fetch", async () => {
  assert.deepEqual(await problems('export const get = () => fetch("/api/runs");', "app/static/lib/api.js"), []);
});

test("an event named by a string outside lib/events.js is refused", async () => {
  for (const code of ['document.addEventListener("ty:runs", () => {});',
                      'document.dispatchEvent(new CustomEvent(`ty:new-${1}`));',
                      'export const NAME = "ty:seed-shown";']) {
    const found = await problems(code);
    assert.ok(found.some((m) => m.includes("lib/events.js")), `${code}: ${found}`);
  }
  assert.deepEqual(await problems('import {RUNS, listen} from "./lib/events.js";\nlisten(document, RUNS, () => {});'), []);
});

test("every event constant is a distinct ty: name listed in NAMES", () => {
  const constants = Object.entries(events).filter(([name]) => /^[A-Z_]+$/.test(name) && name !== "NAMES");
  assert.ok(constants.length >= 8);
  assert.deepEqual(new Set(events.NAMES), new Set(constants.map(([, value]) => value)));
  assert.equal(new Set(events.NAMES).size, events.NAMES.length);
  for (const name of events.NAMES) assert.match(name, /^ty:[a-z-]+$/);
});

test("emit sends the detail that listen hands over", () => {
  const target = new EventTarget();
  const got = [];
  events.listen(target, events.RUNS_SELECT, (detail) => got.push(detail));
  events.emit(target, events.RUNS_SELECT, {ids: [3, 4]});
  events.emit(target, events.RUNS_HIGHLIGHT, {ids: null});  // another name: not heard
  assert.deepEqual(got, [{ids: [3, 4]}]);
});
