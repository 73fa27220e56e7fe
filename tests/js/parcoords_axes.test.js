// The parallel coordinates' axis choice (app/static/parcoords_axes.js): pure parts.
import assert from "node:assert/strict";
import {test} from "node:test";

import {METRIC, axisIds, makeAxis} from "../../app/static/parcoords_axes.js";

const runs = [
  {id: 1, params: {"params.lr": 0.1, "params.epochs": 3, seed: 4000000000}},
  {id: 2, params: {"params.lr": 0.01, "params.epochs": 3, seed: 7}},
];

test("by default: the params that differ (not the seed unless asked), then the metric", () => {
  assert.deepEqual(axisIds(runs, null, false), ["p:params.lr", METRIC]);
  assert.deepEqual(axisIds(runs, null, true), ["p:params.lr", "p:seed", METRIC]);
});

test("the reader's axes in their order; a param no run has is left out, the metric kept", () => {
  assert.deepEqual(axisIds(runs, [METRIC, "p:params.epochs", "p:gone", "p:seed"], false),
    [METRIC, "p:params.epochs", "p:seed"]);
  assert.deepEqual(axisIds(runs, [], false), []);
});

test("an axis spanning more than two decades of positive numbers is log", () => {
  assert.equal(makeAxis([0.1, 0.0001]).kind, "log");
  assert.equal(makeAxis([1, 2]).kind, "linear");
  assert.equal(makeAxis(["a", 1]).kind, "category");
});
