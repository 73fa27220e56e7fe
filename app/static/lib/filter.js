// The runs filter language's browser side (the parser is the server's: app/runs/query/filter_lang.py):
// the builder's condition text (a key, an operator, a value, quoted where the language needs
// it), appended to what the filter box holds, and a refused filter's message as the reader
// reads it ("filter: position 12: expected a value after '>'"). Pure: tests/js/filter.test.js.

export const OPS = ["=", "!=", ">", ">=", "<", "<=", "~", "in"];
const KEYWORDS = new Set(["and", "or", "in"]);
const BARE = /^[^\s()=!<>~,'"]+$/;

// A key or a value as the language reads it: bare when it can be, else in double quotes
// (a backslash before a quote or a backslash in it).
export const quote = (text) => {
  const s = String(text);
  if (BARE.test(s) && !KEYWORDS.has(s.toLowerCase())) return s;
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
};

// One condition: `lr<=0.01`, `name~"a b"`, `opt in (adam, sgd)` (the value of "in": a comma list).
export const condition = (key, op, value) => {
  if (!OPS.includes(op)) throw new Error(`not an operator: ${op}`);
  if (op === "in") {
    const items = String(value).split(",").map((v) => v.trim()).filter(Boolean);
    return `${quote(key)} in (${items.map(quote).join(", ")})`;
  }
  return `${quote(key)}${op}${quote(String(value).trim())}`;
};

// `text` and `cond` joined by "and"; text holding an "or" is put in parentheses first, so the
// new condition holds for all of it ("a or b" + c -> "(a or b) and c").
export const append = (text, cond) => {
  const had = String(text || "").trim();
  if (!had) return cond;
  const outside = had.replace(/"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'/g, "''");
  return /(^|[\s)])or([\s(]|$)/i.test(outside) ? `(${had}) and ${cond}` : `${had} and ${cond}`;
};

// A 422's field errors as one line: the query parameter's name, then the server's message.
export const refusal = (body) => {
  if (!body || !Array.isArray(body.detail)) return null;
  return body.detail
    .map((e) => `${(e.loc[0] === "query" ? e.loc.slice(1) : e.loc).join(".")}: ${e.msg}`)
    .join("; ");
};

// The keys the builder offers for `runs`: the run's own fields, then params (the config's
// `params.` prefix left off: the language finds them bare), then metrics (the last value, max, min).
export const keys = (runs) => {
  const params = new Set();
  const metrics = new Set();
  for (const run of runs) {
    for (const k of Object.keys(run.params || {})) params.add(k.startsWith("params.") ? k.slice(7) : k);
    for (const k of Object.keys(run.summary || {})) metrics.add(k);
  }
  const sorted = (set) => [...set].sort();
  return ["name", "tags", "status", ...sorted(params),
          ...sorted(metrics).flatMap((k) => [k, `${k}.max`, `${k}.min`])];
};
