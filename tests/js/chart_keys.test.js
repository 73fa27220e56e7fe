// lib/chart_keys.js: the charted keys' state the experiment page's picker edits and a saved
// view keeps (null: every key).
import assert from "node:assert/strict";
import {test} from "node:test";

import {isShown, normalizeKeys, pickerSummary, toggled} from "../../app/static/lib/chart_keys.js";

const ALL = ["train/loss", "val/acc", "val/loss"];

test("null charts every key, a list only its own", () => {
  assert.equal(isShown(null, "anything"), true);
  assert.equal(isShown(["val/acc"], "val/acc"), true);
  assert.equal(isShown(["val/acc"], "val/loss"), false);
  assert.equal(isShown([], "val/acc"), false);
});

test("unticking from all lists the rest in the offered order; ticking every key is all again", () => {
  const one = toggled(null, ALL, "val/acc", false);
  assert.deepEqual(one, ["train/loss", "val/loss"]);
  const two = toggled(one, ALL, "train/loss", false);
  assert.deepEqual(two, ["val/loss"]);
  assert.deepEqual(toggled(two, ALL, "train/loss", true), ["train/loss", "val/loss"]);
  assert.equal(toggled(toggled(two, ALL, "train/loss", true), ALL, "val/acc", true), null);
  assert.deepEqual(toggled(["val/loss"], ALL, "val/loss", false), []);
});

test("keys of a saved view that this page does not offer are kept, after the offered ones", () => {
  const shown = toggled(["later/key", "val/acc"], ALL, "train/loss", true);
  assert.deepEqual(shown, ["train/loss", "val/acc", "later/key"]);
  assert.deepEqual(toggled(["later/key", ...ALL], ALL, "val/acc", true), null);
});

test("a view's keys are read back as a list of strings, anything else as all", () => {
  assert.equal(normalizeKeys(null), null);
  assert.equal(normalizeKeys(undefined), null);
  assert.equal(normalizeKeys("val/acc"), null);
  assert.deepEqual(normalizeKeys(["val/acc", "val/acc", "", 3, "x"]), ["val/acc", "x"]);
  assert.deepEqual(normalizeKeys([]), []);
});

test("the summary says how many of the offered keys are charted", () => {
  assert.equal(pickerSummary(null, ALL), "Charts: all 3");
  assert.equal(pickerSummary(["val/acc", "later/key"], ALL), "Charts: 1 of 3");
  assert.equal(pickerSummary([], ALL), "Charts: none of 3");
});
