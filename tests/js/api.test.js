// lib/api.js failureText: the words of a failed action, the same on every page.
import assert from "node:assert/strict";
import {test} from "node:test";

import {failureText} from "../../app/static/lib/api.js";

test("a refusal, a conflict and a refused value say the server's own message", () => {
  const detail = "this run belongs to another user: you may read it but not change it";
  assert.equal(failureText({status: 403, body: {detail}}), detail);
  assert.equal(failureText({status: 409, body: {detail: "cancel it first"}}), "cancel it first");
  const invalid = {detail: [{loc: ["body", "tags"], msg: "too many"}]};
  assert.equal(failureText({status: 422, body: invalid}), "body.tags: too many");
});

test("an unreachable server and a proxy's error page say what happened instead", () => {
  const lost = {detail: "The server cannot be reached: TypeError: Failed to fetch"};
  assert.equal(failureText({status: 0, body: lost}), lost.detail);
  assert.equal(failureText({status: 502, body: "<html>Bad Gateway</html>"}),
               "the server failed (HTTP 502)");
  assert.equal(failureText({status: 503, body: null}), "the server failed (HTTP 503)");
  assert.equal(failureText({status: 500, body: {detail: "boom"}}), "boom");
});

// lib/api.js call: a server that dies while it sends its answer. A real HTTP server announces
// 1000 bytes and closes after a few; the fetch resolves, its body read rejects.
test("an answer cut off mid-body resolves as unreachable instead of rejecting", async () => {
  const {createServer} = await import("node:http");
  const server = createServer((req, res) => {
    res.writeHead(200, {"Content-Type": "application/json", "Content-Length": "1000"});
    res.write('{"runs": [');
    res.socket.end();  // FIN after the bytes sent: the headers arrive, the body stops short
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  globalThis.document = {querySelector: () => null};  // csrf(): a page without the meta tag
  try {
    const {call} = await import("../../app/static/lib/api.js");
    const r = await call("GET", `http://127.0.0.1:${server.address().port}/api/runs`);
    assert.equal(r.ok, false);
    assert.equal(r.status, 0);
    assert.match(r.body.detail, /^The server cannot be reached: /);
  } finally {
    delete globalThis.document;
    server.close();
  }
});
