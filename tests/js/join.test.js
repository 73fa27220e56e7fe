// Curves joined onto one x column (app/static/lib/join.js), against uPlot.join's answer
// written out plainly (a Set of every x, sorted, a Map from x to its index).
import assert from "node:assert/strict";
import {test} from "node:test";

import {join} from "../../app/static/lib/join.js";

const plain = (tables) => {
  const xs = [...new Set(tables.flatMap(([x]) => [...x]))].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  return [xs, ...tables.map(([x, y]) => {
    const ys = Array(xs.length).fill(undefined);
    x.forEach((v, i) => { ys[at.get(v)] = y[i]; });
    return ys;
  })];
};

test("curves of their own x are joined: undefined where a curve has no point, null kept", () => {
  const tables = [[[1, 3, 5], [10, null, 50]], [[2, 3, 4, 9], [0.2, 0.3, 0.4, 0.9]], [[], []]];
  assert.deepEqual(join(tables), [
    [1, 2, 3, 4, 5, 9],
    [10, undefined, null, undefined, 50, undefined],
    [undefined, 0.2, 0.3, 0.4, undefined, 0.9],
    [undefined, undefined, undefined, undefined, undefined, undefined],
  ]);
  assert.deepEqual(join([]), [[]]);
});

test("random curves, steps back and repeats included, join as uPlot.join joins them", () => {
  let seed = 43;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  for (let trial = 0; trial < 200; trial++) {
    const tables = Array.from({length: 1 + Math.floor(random() * 30)}, () => {
      const n = Math.floor(random() * 40), x = [], y = [];
      let step = Math.floor(random() * 100);
      for (let i = 0; i < n; i++) {
        step += random() < 0.1 ? -Math.floor(random() * 20) : Math.floor(random() * 5);
        x.push(random() < 0.3 ? step + 0.5 : step);
        y.push(random() < 0.1 ? null : random());
      }
      return [x, y];
    });
    assert.deepEqual(join(tables), plain(tables));
  }
});

test("1,000 curves of 24 points on 1,000 steps (an overlay's first draw) join as uPlot.join", () => {
  const tables = Array.from({length: 1000}, (_, r) => {
    const x = Array.from({length: 24}, (_, i) => 1 + ((i * 41 + r * 7) % 1000)).sort((a, b) => a - b);
    return [[...new Set(x)], [...new Set(x)].map((v) => v / 1000)];
  });
  const joined = join(tables);
  assert.equal(joined.length, 1001);
  assert.deepEqual(joined, plain(tables));
});
