// TypeScript's checker over the front-end (tsconfig.json, run by `make js-check`) refuses an
// event sent with a detail of the wrong shape (lib/events.js ties each name to its detail's
// JSDoc type): a snippet checked with the project's own settings.
import assert from "node:assert/strict";
import {spawnSync} from "node:child_process";
import {mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";
import {test} from "node:test";
import {fileURLToPath} from "node:url";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

const check = (code) => {
  const dir = mkdtempSync(join(tmpdir(), "ty-checkjs-"));
  try {
    writeFileSync(join(dir, "page.js"), code);
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({extends: join(ROOT, "tsconfig.json"), include: ["page.js"]}));
    return spawnSync(join(ROOT, "node_modules/.bin/tsc"), ["-p", join(dir, "tsconfig.json")], {encoding: "utf8"});
  } finally {
    rmSync(dir, {recursive: true, force: true});
  }
};

test("an event's detail of the wrong shape is refused; the right one passes", () => {
  const events = JSON.stringify(join(ROOT, "app/static/lib/events.js"));
  const bad = check(`import {RUNS_SELECT, emit} from ${events};\nemit(document, RUNS_SELECT, {ids: "3"});\n`);
  assert.notEqual(bad.status, 0);
  assert.match(bad.stdout, /Type 'string' is not assignable to type 'number\[\]'/);
  const good = check(`import {RUNS_SELECT, emit} from ${events};\nemit(document, RUNS_SELECT, {ids: [3]});\n`);
  assert.equal(good.status, 0, good.stdout);
});

// Every page module is checked: none opts out with @ts-nocheck (nor hides a line with
// @ts-ignore); a type the checker cannot see is a JSDoc cast instead.
test("no module of app/static opts out of the checker", () => {
  const dir = join(ROOT, "app/static");
  const opted = readdirSync(dir, {recursive: true})
    .filter((name) => String(name).endsWith(".js"))
    .filter((name) => /@ts-(nocheck|ignore)\b/.test(readFileSync(join(dir, String(name)), "utf8")));
  assert.deepEqual(opted, []);
});
