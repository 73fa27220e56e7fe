// The compare page's run picker: a search over every run on the box, answered by the server
// (GET /api/runs?q=: words found in a name, a tag or a param's value; text that reads as a
// condition, "lr<0.01", goes as filter=), newest first, MAX_SHOWN at a time, so it stays fast
// at thousands of runs (bench/picker_search.py). Each run shows its name, status, tags, the
// key params (those that differ among the matches, not the seed) and the chosen metric's last
// value. Ticked runs stay listed on top while the search changes; the form sends them as
// ?runs= (compare.js). Keyboard: type, ArrowDown into the list, ArrowUp/ArrowDown between
// runs, Space ticks, Escape back to the search, Enter in the search searches at once.
import {call, errorText} from "./lib/api.js";
import {compareKeys, differingParams, fmtParam} from "./lib/format.js";
import {api} from "./lib/urls.js";

export const picker = (form) => {
  const MAX_SHOWN = 25, WAIT_MS = 150;  // bench/picker_search.py measures 25
  const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
  const list = $("picker-results"), input = /** @type {HTMLInputElement} */ ($("picker-search")),
    metric = /** @type {HTMLSelectElement} */ ($("picker-metric"));
  const status = $("picker-status");
  if (!list || !input) return null;
  $("picker-search-box").hidden = false;
  let asked = 0, timer = null, results = [];

  const el = (tag, text, cls) => {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  };
  const boxes = () => [.../** @type {NodeListOf<HTMLInputElement>} */ (list.querySelectorAll('input[name="run"]'))];
  const chosenItems = () => boxes().filter((b) => b.checked).map((b) => /** @type {HTMLLIElement} */ (b.closest("li")));
  const isCondition = (text) => /[=<>~]/.test(text) || /\s(in|and|or)\s/i.test(` ${text} `);

  const lastValue = (run, key) => {
    const v = ((run.summary || {})[key] || {}).last;
    return typeof v === "number" ? fmtParam(v) : "–";
  };
  const item = (run, keys) => {
    const li = el("li");
    li.dataset.runId = String(run.id);
    const label = el("label", undefined, "check");
    const box = Object.assign(el("input"), {type: "checkbox", name: "run", value: String(run.id)});
    label.append(box, el("span", run.name ? `run ${run.id} ${run.name}` : `run ${run.id}`, "picker-name"), " ",
      el("span", run.status, `badge status-${run.status}`));
    for (const tag of run.tags || []) label.append(" ", el("span", tag, "badge tag"));
    const params = keys.filter((k) => k in (run.params || {}))
      .map((k) => `${k.slice(k.lastIndexOf(".") + 1)}=${fmtParam(run.params[k])}`);
    if (params.length) label.append(" ", el("span", params.join(" "), "muted picker-params"));
    if (metric.value) label.append(" ", el("span", `${metric.value} ${lastValue(run, metric.value)}`, "picker-metric"));
    li.append(label);
    return li;
  };

  // The metric shown: any key the matches logged; until the reader picks, a val/ key.
  const fillMetrics = () => {
    const keys = new Set(metric.value ? [metric.value] : []);
    for (const r of results) for (const k of Object.keys(r.summary || {})) keys.add(k);
    const sorted = [...keys].sort(compareKeys);
    const current = metric.value || sorted.find((k) => /(^|\/)val/i.test(k)) || sorted[0] || "";
    metric.replaceChildren(...sorted.map((k) => Object.assign(el("option", k), {value: k})));
    metric.value = current;
  };

  const show = () => {
    const kept = chosenItems();
    const keptIds = new Set(kept.map((li) => li.dataset.runId));
    // Key params: those that differ among the matches, the config's own (params.*) first.
    const differ = differingParams(results);
    const keys = [...differ.filter((k) => k.startsWith("params.")), ...differ.filter((k) => !k.startsWith("params."))].slice(0, 3);
    list.replaceChildren(...kept, ...results.filter((r) => !keptIds.has(String(r.id))).map((r) => item(r, keys)));
  };

  const search = async () => {
    clearTimeout(timer);
    const text = input.value.trim();
    const mine = ++asked;
    const query = {limit: MAX_SHOWN, sort: "-id", summary_keys: metric.value || undefined,
                   ...(isCondition(text) ? {filter: text} : {q: text})};
    const t0 = performance.now();
    const r = await call("GET", api.runs(query));
    if (mine !== asked) return;  // a later search is on its way
    list.dataset.answerMs = String(Math.round(performance.now() - t0));
    if (!r.ok) {
      results = [];
      status.textContent = `No search: ${errorText(r.body)}`;
      status.classList.add("form-error");
    } else {
      results = r.body.runs;
      status.classList.remove("form-error");
      const more = r.body.next ? ` (the newest ${MAX_SHOWN}: narrow the search for others)` : "";
      status.textContent = results.length ? `${results.length} run${results.length === 1 ? "" : "s"} found${more}.`
        : "No run matches.";
    }
    fillMetrics();
    show();
    list.dataset.searchedFor = text;  // the text this list answers
    list.dataset.searched = String(mine);
  };

  input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(search, WAIT_MS); });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); search(); }
    if (e.key === "ArrowDown" && boxes().length) { e.preventDefault(); boxes()[0].focus(); }
  });
  list.addEventListener("keydown", (e) => {
    const all = boxes(), i = all.indexOf(/** @type {HTMLInputElement} */ (document.activeElement));
    if (i < 0) return;
    if (e.key === "ArrowDown" && i < all.length - 1) { e.preventDefault(); all[i + 1].focus(); }
    if (e.key === "ArrowUp") { e.preventDefault(); (i > 0 ? all[i - 1] : input).focus(); }
    if (e.key === "Escape") { e.preventDefault(); input.focus(); }
  });
  metric.addEventListener("change", search);
  search();
  return {search};
};
