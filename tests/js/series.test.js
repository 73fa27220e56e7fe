// The charts' series arithmetic (app/static/lib/series.js): smoothing and downsampling.
import assert from "node:assert/strict";
import {test} from "node:test";

import {
  decimate, emaAll, emaPush, emaState, lowerBound, xAtSteps, xMetricKey,
} from "../../app/static/lib/series.js";

test("lowerBound finds the first index at or past x", () => {
  const a = [1, 3, 3, 5];
  assert.equal(lowerBound(a, 0), 0);
  assert.equal(lowerBound(a, 3), 1);
  assert.equal(lowerBound(a, 4), 3);
  assert.equal(lowerBound(a, 9), 4);
  assert.equal(lowerBound([], 1), 0);
});

test("the smoothing is TensorBoard's debiased EMA: a constant stays constant from the start", () => {
  assert.deepEqual(emaAll([2, 2, 2], 0.9, emaState()).map((v) => Number(v.toFixed(12))), [2, 2, 2]);
  const s = emaState();
  assert.equal(emaPush(s, 1, 0.5), 1);
  // (0.5 * 0.5 + 0.5 * 3) / (1 - 0.25)
  assert.equal(emaPush(s, 3, 0.5), (0.25 + 1.5) / 0.75);
});

test("no smoothing returns the values; gaps stay gaps and do not move the average", () => {
  assert.deepEqual(emaAll([1, null, 3], 0, emaState()), [1, null, 3]);
  const s = emaState();
  const out = emaAll([1, null, NaN, 1], 0.6, s);
  assert.equal(out[1], null);
  assert.equal(out[2], null);
  assert.equal(Number(out[3].toFixed(12)), 1);
  assert.equal(s.n, 2);
});

test("decimation keeps each bucket's min and max, and the first and last points", () => {
  const n = 1000;
  const d = {step: [], value: [], time: []};
  for (let i = 0; i < n; i++) { d.step.push(i); d.value.push(i === 437 ? 1e6 : Math.sin(i)); d.time.push(i * 10); }
  const out = decimate(d, 100);
  assert.ok(out.step.length <= 100 + 2, `${out.step.length} points`);
  assert.equal(out.step[0], 0);
  assert.equal(out.step[out.step.length - 1], n - 1);
  assert.ok(out.value.includes(1e6), "the spike is kept");
  assert.deepEqual(out.step, [...out.step].sort((a, b) => a - b));
  assert.deepEqual(out.time, out.step.map((s) => s * 10));
});

test("a bucket of gaps keeps its first point (and the series its last)", () => {
  const d = {step: [0, 1, 2, 3, 4, 5], value: [1, 2, null, null, null, null], time: [0, 0, 0, 0, 0, 0]};
  const out = decimate(d, 6);  // 2 buckets of 3
  assert.deepEqual(out.step, [0, 1, 3, 5]);
  assert.deepEqual(out.value, [1, 2, null, null]);
});

test("xAtSteps: the x-metric's value at each step, interpolated between its points, null outside", () => {
  const tokens = {step: [0, 10, 20], value: [0, 2560, 5120]};
  assert.deepEqual(xAtSteps([0, 5, 10, 15, 20], tokens), [0, 1280, 2560, 3840, 5120]);
  // before the first point and after the last: nothing known, a gap
  const epoch = {step: [100, 200], value: [1, 2]};
  assert.deepEqual(xAtSteps([50, 100, 150, 200, 250], epoch), [null, 1, 1.5, 2, null]);
  // a null x value stays a gap; no x series at all: all gaps
  assert.deepEqual(xAtSteps([1, 2, 3], {step: [1, 3], value: [null, 3]}), [null, null, 3]);
  assert.deepEqual(xAtSteps([1, 2], null), [null, null]);
  assert.deepEqual(xAtSteps([1, 2], {step: [], value: []}), [null, null]);
});

test("xMetricKey reads the chart state's x: metric:<key>, or null for step and time", () => {
  assert.equal(xMetricKey("metric:epoch"), "epoch");
  assert.equal(xMetricKey("metric:train/tokens"), "train/tokens");
  for (const x of ["step", "time", "relative", undefined]) assert.equal(xMetricKey(x), null);
});
