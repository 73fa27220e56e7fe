// The run page's event hub (app/static/lib/run_stream.js): what its parts hear, when they
// load again, and how a dropped stream comes back. The browser's EventSource is stood in for
// by an EventTarget the test speaks through (Node has no EventSource).
import assert from "node:assert/strict";
import {test} from "node:test";

import {RunStream, refresher} from "../../app/static/lib/run_stream.js";

class FakeSource extends EventTarget {
  static made = [];
  constructor(url) { super(); this.url = url; this.closed = false; FakeSource.made.push(this); }
  close() { this.closed = true; }
  say(name, data) {
    const e = new Event(name);
    e.data = data === undefined ? "" : JSON.stringify(data);
    this.dispatchEvent(e);
  }
}

const stream = (over = {}) => {
  FakeSource.made = [];
  let n = 0;
  return new RunStream({url: () => `/events?n=${n++}`, finished: () => false, EventSource: FakeSource,
                        retryMs: 1, silentMs: 60000, ...over});
};

test("refresher: loads when forced or when the interval passed, one load at a time", async () => {
  let t = 0;
  const loads = [];
  let release = null;
  const call = refresher(() => { loads.push(t); return new Promise((r) => { release = r; }); }, 1000, () => t);
  call(false);                 // first call: nothing loaded yet, so it loads
  assert.deepEqual(loads, [0]);
  call(true);                  // during a load: remembered
  call(false);
  assert.deepEqual(loads, [0]);
  t = 10;
  release();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(loads, [0, 10]);   // the forced one ran after
  release();
  await new Promise((r) => setImmediate(r));
  t = 500;
  call(false);                 // too soon
  assert.deepEqual(loads, [0, 10]);
  t = 1011;
  call(false);
  assert.deepEqual(loads, [0, 10, 1011]);
  release();
});

test("refresher: a call too soon is owed and runs once the interval has passed", async () => {
  let t = 0;
  const loads = [];
  const timers = [];
  const call = refresher(() => { loads.push(t); }, 1000, () => t, (fn, ms) => timers.push([fn, ms]));
  await call(false);
  t = 400;
  await call(false);           // too soon: owed, one timer for the rest of the interval
  await call(false);
  assert.deepEqual(loads, [0]);
  assert.deepEqual(timers.map(([, ms]) => ms), [600]);
  t = 1000;
  timers[0][0]();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(loads, [0, 1000]);  // the news that came too soon was loaded after all
  t = 1500;
  await call(false);           // owed again, then a forced load covers it
  await call(true);
  assert.deepEqual(loads, [0, 1000, 1500]);
  timers[1][0]();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(loads, [0, 1000, 1500]);  // nothing owed any more: no load
});

test("subscribers hear the stream's events with their data, and the link", () => {
  const s = stream();
  const heard = [];
  s.on("metrics", (d) => heard.push(["metrics", d]));
  s.on("log", (d) => heard.push(["log", d]));
  s.on("link", (l) => heard.push(["link", l]));
  s.connect();
  const src = FakeSource.made[0];
  assert.equal(src.url, "/events?n=0");
  src.say("open");
  src.say("metrics", {series: {loss: {step: [1], value: [2]}}});
  src.say("log", {text: "hi\n", offset: 3});
  assert.deepEqual(heard, [["link", "up"], ["metrics", {series: {loss: {step: [1], value: [2]}}}],
                           ["log", {text: "hi\n", offset: 3}]]);
  s.close();
});

test("a finished status closes the stream; parts refresh once more on it", async () => {
  const s = stream();
  const loads = [];
  s.refreshOn(() => { loads.push("files"); }, 10000);
  const links = [];
  s.on("link", (l) => links.push(l));
  s.connect();
  const src = FakeSource.made[0];
  src.say("open");
  src.say("ping", {});          // the first event: loads (nothing loaded yet)
  src.say("ping", {});          // within the interval: not again
  assert.deepEqual(loads, ["files"]);
  await new Promise((r) => setImmediate(r));
  src.say("status", {status: "succeeded"});
  assert.deepEqual(loads, ["files", "files"]);
  assert.ok(src.closed);
  assert.equal(s.open, false);
  assert.deepEqual(links, ["up", "closed"]);
});

test("a dropped stream says so and reconnects with the page's position asked again", async () => {
  const s = stream();
  const links = [];
  s.on("link", (l) => links.push(l));
  s.connect();
  FakeSource.made[0].say("open");
  FakeSource.made[0].say("error");
  assert.ok(FakeSource.made[0].closed);
  assert.deepEqual(links, ["up", "down"]);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(FakeSource.made.length, 2);
  assert.equal(FakeSource.made[1].url, "/events?n=1");
  FakeSource.made[0].say("metrics", {series: {}});  // the old source is not heard any more
  FakeSource.made[1].say("open");
  assert.deepEqual(links, ["up", "down", "up"]);
  s.close();
});

test("a finished run's drop is not reconnected; a silent stream counts as dropped", async () => {
  const done = stream({finished: () => true});
  done.connect();
  FakeSource.made[0].say("error");
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(FakeSource.made.length, 1);

  const quiet = stream({silentMs: 10});
  const links = [];
  quiet.on("link", (l) => links.push(l));
  quiet.connect();
  FakeSource.made[0].say("open");
  await new Promise((r) => setTimeout(r, 40));
  assert.ok(FakeSource.made[0].closed);
  assert.equal(links[1], "down");
  quiet.close();
});
