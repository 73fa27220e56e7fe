// +/-inf in a chart (app/static/lib/diverged.js): sent as the largest double, drawn just past
// the other values, named in the tooltip.
import assert from "node:assert/strict";
import {test} from "node:test";

import {INF_SENT, drawable, tipValue} from "../../app/static/lib/diverged.js";

test("a diverging curve is drawn a tenth of the span past the other values, never a gap", () => {
  const drawn = drawable([[1, 0.5, INF_SENT, null], [2, -INF_SENT, undefined]]);
  assert.deepEqual(drawn.ys, [[1, 0.5, 2.15, null], [2, 0.35, undefined]]);
  assert.equal(drawn.top, 2.15);
  assert.equal(drawn.bottom, 0.35);
  assert.equal(tipValue(2.15, drawn), "+inf");
  assert.equal(tipValue(0.35, drawn), "-inf");
  assert.equal(tipValue(0.123456, drawn), "0.12346");
});

test("without an infinity the traces go through as they are", () => {
  const ys = [[1, 2], [null, 3]];
  const drawn = drawable(ys);
  assert.equal(drawn.ys, ys);
  assert.equal(drawn.top, null);
  assert.equal(tipValue(2, drawn), "2");
});

test("only infinities still draw: around 0..1", () => {
  const drawn = drawable([[INF_SENT, INF_SENT]]);
  assert.deepEqual(drawn.ys, [[1.1, 1.1]]);
  assert.equal(drawn.bottom, null);
});
