// lib/first_page.js: the experiment page's held first page of the runs table, used only for the
// query it answers.
import assert from "node:assert/strict";
import {test} from "node:test";

import {heldPage, metricKeys, usable} from "../../app/static/lib/first_page.js";

const runs = [{id: 3, summary: {"val/acc": {}}}, {id: 2, summary: {}}, {id: 1, summary: {}}];

test("the table's page is the first `take` of the curves' runs, with its cursor", () => {
  const held = heldPage(JSON.stringify(runs), JSON.stringify({take: 2, next: "c2"}));
  assert.deepEqual(held.runs.map((r) => r.id), [3, 2]);
  assert.equal(held.next, "c2");
  assert.equal(heldPage(JSON.stringify(runs), JSON.stringify({take: 3, next: null})).next, null);
});

test("missing or junk elements hold nothing", () => {
  assert.equal(heldPage(null, "{}"), null);
  assert.equal(heldPage("[", JSON.stringify({take: 1})), null);
  assert.equal(heldPage("{}", JSON.stringify({take: 1})), null);
  assert.equal(heldPage("[]", "{}"), null);
});

test("used only for the newest-first, unfiltered query whose summary keys it carries", () => {
  const held = heldPage(JSON.stringify(runs), JSON.stringify({take: 3, next: null}));
  const query = {sort: "-id", filtered: false, keys: ["val/acc"]};
  assert.equal(usable(held, query), held);
  assert.equal(usable(held, {...query, sort: "id"}), null);
  assert.equal(usable(held, {...query, filtered: true}), null);
  assert.equal(usable(null, query), null);
  // a run whose summaries were cut may lack a chosen key: the API is asked
  const cut = {runs: [{id: 1, summary: {}, summary_cut: true}], next: null};
  assert.equal(usable(cut, query), null);
  assert.equal(usable(cut, {...query, keys: []}), cut);
  const kept = {runs: [{id: 1, summary: {"val/acc": {}}, summary_cut: true}], next: null};
  assert.equal(usable(kept, query), kept);
});

test("the page's held keys decide: a column of any other key asks the API", () => {
  const keys = JSON.stringify({all: ["train/loss", "val/acc", "x/k1"], held: ["train/loss", "val/acc"]});
  const held = heldPage(JSON.stringify(runs), JSON.stringify({take: 3, next: null}), keys);
  assert.deepEqual([...held.keys], ["train/loss", "val/acc"]);
  const query = {sort: "-id", filtered: false, keys: ["train/loss", "val/acc"]};
  // carried, though run 2 has no summary of them (it logged neither)
  assert.equal(usable(held, query), held);
  assert.equal(usable(held, {...query, keys: ["x/k1"]}), null);
  assert.equal(usable(held, {...query, keys: []}), held);
  // without the keys element: as before, the runs' own summaries
  assert.equal(heldPage(JSON.stringify(runs), JSON.stringify({take: 3, next: null}), null).keys, null);
  assert.equal(heldPage(JSON.stringify(runs), JSON.stringify({take: 3}), "{"), null);
});

test("metricKeys reads {all, held} from the page, null when missing or junk", () => {
  const doc = (text) => ({getElementById: () => (text === null ? null : {textContent: text})});
  assert.deepEqual(metricKeys(doc(JSON.stringify({all: ["a"], held: []}))), {all: ["a"], held: []});
  assert.equal(metricKeys(doc(null)), null);
  assert.equal(metricKeys(doc("[")), null);
  assert.equal(metricKeys(doc("{}")), null);
});
