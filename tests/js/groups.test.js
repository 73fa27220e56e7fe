// Grouping runs and aggregating their curves (app/static/lib/groups.js).
import assert from "node:assert/strict";
import {test} from "node:test";

import {
  aggregate, groupChoices, groupRuns, normalizeGroup, paramBy, stats, TAGS,
} from "../../app/static/lib/groups.js";
import {RUN_PALETTE} from "../../app/static/lib/format.js";

const run = (id, params, tags = []) => ({id, params, tags});

test("runs group by a param's value, in value order, each with its colour and its runs", () => {
  const runs = [run(1, {"params.lr": 0.1, seed: 1}), run(2, {"params.lr": 0.01, seed: 2}),
    run(3, {"params.lr": 0.1, seed: 3}), run(4, {seed: 4})];
  const groups = groupRuns(runs, paramBy("params.lr"));
  assert.deepEqual(groups.map((g) => g.label), ["params.lr=0.01", "params.lr=0.1", "params.lr unset"]);
  assert.deepEqual(groups.map((g) => g.runs.map((r) => r.id)), [[2], [1, 3], [4]]);
  assert.deepEqual(groups.map((g) => g.color), RUN_PALETTE.slice(0, 3));
});

test("runs group by their tag set, whatever the tags' order; untagged runs form one group", () => {
  const runs = [run(1, {}, ["b", "a"]), run(2, {}, ["a", "b"]), run(3, {}), run(4, {}, ["a"])];
  const groups = groupRuns(runs, TAGS);
  assert.deepEqual(groups.map((g) => [g.label, g.runs.length]), [["(no tags)", 1], ["a", 1], ["a, b", 2]]);
});

test("the choices are every param key (a shared one too) and the tags", () => {
  const choices = groupChoices([run(1, {"params.lr": 0.1, seed: 1}), run(2, {"params.lr": 0.1, seed: 2})]);
  assert.deepEqual(choices.map((c) => c.by), ["param:params.lr", "param:seed", "tags"]);
});

test("a saved grouping is taken only when valid", () => {
  assert.deepEqual(normalizeGroup({by: "param:lr", band: "std"}), {by: "param:lr", band: "std"});
  assert.deepEqual(normalizeGroup({by: "tags"}), {by: "tags", band: "minmax"});
  assert.deepEqual(normalizeGroup({by: "lr", band: "iqr"}), {by: null, band: "minmax"});
  assert.deepEqual(normalizeGroup(null), {by: null, band: "minmax"});
});

test("stats: mean, min, max, population std over the finite values only", () => {
  assert.deepEqual(stats([1, 3, null, NaN, "x"]), {n: 2, mean: 2, min: 1, max: 3, std: 1});
  assert.equal(stats([null]), null);
});

test("aggregate aligns on x and averages over the runs that have each x", () => {
  const a = {x: [0, 1, 2], y: [1, 2, 3]};
  const b = {x: [0, 2, 4], y: [3, 4, 5]};
  const c = {x: [1, 2], y: [null, 8]};  // a gap at x=1 does not count there
  const out = aggregate([a, b, c]);
  assert.deepEqual(out.x, [0, 1, 2, 4]);
  assert.deepEqual(out.n, [2, 1, 3, 1]);
  assert.deepEqual(out.mean, [2, 2, 5, 5]);
  assert.deepEqual(out.lo, [1, 2, 3, 5]);
  assert.deepEqual(out.hi, [3, 2, 8, 5]);
});

test("aggregate's std band is the mean +/- the population std at each x", () => {
  const out = aggregate([{x: [0, 1], y: [1, 10]}, {x: [0, 1], y: [3, 10]}], "std");
  assert.deepEqual(out.mean, [2, 10]);
  assert.deepEqual(out.lo, [1, 10]);
  assert.deepEqual(out.hi, [3, 10]);
});

test("aggregate of nothing is empty", () => {
  assert.deepEqual(aggregate([]), {x: [], mean: [], lo: [], hi: [], n: []});
  assert.deepEqual(aggregate([{x: [null, 1], y: [1, Infinity]}]).x, []);
});
