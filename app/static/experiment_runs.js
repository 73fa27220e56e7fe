// THE runs table (templates/_runs_table.html), of an experiment's page or a sweep's (its
// trials: the section's data-experiment-id or data-sweep-id is the GET /api/runs filter),
// rebuilt from GET /api/runs once the page loads (the server's
// rows are what shows before, and without scripts; the experiment page's first page comes with
// it: lib/first_page.js): the params that differ across the loaded
// runs as columns, summary columns picked per metric key (last/min/max), sort by any column (in
// the API's SQL: `sort=`), filters (status, tag, and the filter language's text, typed or built
// a condition at a time: lib/filter.js; a refused filter empties the table and says why),
// cursor paging ("Load more"), and the selected runs compared, tagged or deleted. A run its
// sweep stopped early is marked next to its status, the reason in the mark's title.
// Every name, key and value from a run reaches the page as textContent, never as HTML.
import {call, deleteObject, errorText, failureText, searchKeys} from "./lib/api.js";
import {markStale} from "./lib/dom.js";
import {fmtBytes, lostText, runColor} from "./lib/format.js";
import {append, condition, keys as filterKeys, refusal} from "./lib/filter.js";
import {metricKeys, readHeld, usable} from "./lib/first_page.js";
import {RUNS, RUNS_HIGHLIGHT, RUNS_LINK, RUNS_NEED, RUNS_REFRESHED, RUNS_SELECT, SEED_SHOWN, emit, listen} from "./lib/events.js";
import {register} from "./lib/page_state.js";
import {api, pages} from "./lib/urls.js";
import {columns, defaultSummaries, el, keyCounts, splitSummary, summaryKeys} from "./runs_columns.js";
import {bindColumnSearch, fillPicker} from "./runs_picker.js";
import {bindBy, getState as groupingState, onChange as onGrouping, setState as setGrouping} from "./grouping.js";
import {groupedRows} from "./runs_groups.js";

(() => {
  const section = document.getElementById("runs-section");
  if (!section) return;
  // One of the two: the runs of an experiment, or the trials of a sweep.
  const scope = section.dataset.sweepId
    ? {key: "sweep_id", id: section.dataset.sweepId, columns: `sweep.${section.dataset.sweepId}`}
    : {key: "experiment_id", id: section.dataset.experimentId, columns: section.dataset.experimentId};
  const owners = JSON.parse(section.dataset.owners || "{}");
  const table = /** @type {HTMLElement} */ (document.getElementById("runs"));
  /**
   * The table's controls whose element type matters (templates: experiment.html's runs section).
   * @typedef {{"runs-status": HTMLSelectElement, "runs-tag": HTMLInputElement,
   *            "runs-filter": HTMLInputElement, "runs-filter-key": HTMLInputElement,
   *            "runs-filter-op": HTMLSelectElement, "runs-filter-value": HTMLInputElement,
   *            "runs-tag-input": HTMLInputElement, "runs-compare": HTMLButtonElement,
   *            "runs-tag-selected": HTMLButtonElement, "runs-delete": HTMLButtonElement}} Controls
   */
  const $ = /** @type {(<K extends keyof Controls>(id: K) => Controls[K]) & ((id: string) => HTMLElement)} */ (
    (id) => document.getElementById(id));
  const PAGE = 100;

  /**
   * @type {{sort: string, runs: import("./lib/events.js").RunRow[], next: string | null,
   *         selected: Set<number>, newest: number, lostSince: Date | null, highlight: Set<number> | null,
   *         summaries: string[] | null, expanded: Set<string>, carried: Set<string> | null,
   *         extraKeys: Set<string>}}
   */
  const state = {
    sort: "-id",
    runs: [],
    next: null,
    selected: new Set(),
    newest: Infinity, // the newest run id the curves' refresh has seen (a higher one: load again)
    lostSince: null, // when the server stopped answering (a Date), null while it answers
    highlight: null, // ids the parallel coordinates' brush keeps (a Set), null: no brush
    summaries: null, // chosen summary columns, ["train/loss.last", ...]; null: not chosen yet
    expanded: new Set(), // grouped (grouping.js): the keys of the groups shown open
    carried: null, // the keys whose summaries the loaded runs carry (a Set), null: a list's
    extraKeys: new Set(), // keys asked for besides the columns' (the parallel coordinates' metric)
  };
  // The first keys the page's runs logged (the experiment page says; lib/first_page.js),
  // offered as columns and filter keys besides the loaded runs' own; the column picker
  // searches the others. There the runs are listed with their columns' summaries alone.
  const pageScoped = metricKeys(document) !== null, pageKeys = (metricKeys(document) || {all: []}).all;
  const keysRun = {summary: Object.fromEntries(pageKeys.map((k) => [k, {}]))};
  // The picked summary columns are kept per experiment in this browser, for the next visit.
  const COLUMNS_KEY = `ty.runs.columns.${scope.columns}`;
  try {
    const saved = JSON.parse(localStorage.getItem(COLUMNS_KEY) || "null");
    if (Array.isArray(saved) && saved.every((c) => typeof c === "string")) state.summaries = saved;
  } catch (_) { /* storage unavailable or junk: the defaults */ }
  const saveColumns = () => {
    try { localStorage.setItem(COLUMNS_KEY, JSON.stringify(state.summaries)); } catch (_) { /* ok */ }
  };

  const say = (id, text) => { $(id).textContent = text; $(id).hidden = !text; };
  const showError = (text) => say("runs-error", text);
  const showNotice = (text) => say("runs-notice", text);

  // --- rendering --------------------------------------------------------------------------

  const sortName = () => state.sort.replace(/^-/, "");
  const render = () => {
    const cols = columns(state.runs, state.summaries, owners);
    const head = el("tr");
    const all = el("input");
    all.type = "checkbox";
    all.id = "runs-select-all";
    all.setAttribute("aria-label", "Select all runs shown");
    all.checked = state.runs.length > 0 && state.runs.every((r) => state.selected.has(r.id));
    all.addEventListener("change", () => {
      for (const run of state.runs) {
        if (all.checked) state.selected.add(run.id); else state.selected.delete(run.id);
      }
      render();
    });
    const allTh = el("th");
    allTh.append(all);
    head.append(allTh);
    for (const col of cols) {
      const th = el("th", undefined, col.num ? "num" : undefined);
      if (col.cls) th.classList.add(col.cls);
      if (col.param) th.dataset.param = col.param;
      if (col.summary) th.dataset.summary = col.summary;
      if (col.sort) {
        const button = el("button", col.title, "sort");
        button.type = "button";
        button.dataset.sort = col.sort;
        if (sortName() === col.sort) {
          const desc = state.sort.startsWith("-");
          th.setAttribute("aria-sort", desc ? "descending" : "ascending");
          button.textContent = `${col.title} ${desc ? "▼" : "▲"}`;
        }
        button.addEventListener("click", () => {
          state.sort = /** @type {string} */ (sortName() === col.sort && !state.sort.startsWith("-") ? `-${col.sort}` : col.sort);
          load();
        });
        th.append(button);
      } else {
        th.textContent = col.title;
      }
      head.append(th);
    }
    const runRow = (run) => {
      const tr = el("tr");
      tr.dataset.runId = String(run.id);
      tr.style.setProperty("--run-color", runColor(run.id));
      if (run.stopped_early) tr.classList.add("stopped-early");
      if (state.highlight) tr.classList.add(state.highlight.has(run.id) ? "brushed" : "brushed-out");
      const box = el("input", undefined, "run-select");
      box.type = "checkbox";
      box.value = String(run.id);
      box.setAttribute("aria-label", `Select run ${run.id}`);
      box.checked = state.selected.has(run.id);
      box.addEventListener("change", () => {
        if (box.checked) state.selected.add(run.id); else state.selected.delete(run.id);
        all.checked = state.runs.every((r) => state.selected.has(r.id));
        updateActions();
      });
      const td = el("td");
      td.append(box);
      tr.append(td);
      for (const col of cols) tr.append(col.cell(run));
      return tr;
    };
    // Grouped: a row per group (runs_groups.js), its runs under it once expanded.
    const body = el("tbody");
    const group = groupingState().group;
    if (group.by) body.append(...groupedRows(state.runs, group, cols, runRow, state.expanded, toggleGroup));
    else body.append(...state.runs.map(runRow));
    bindBy($("runs-group-by"), state.runs);
    const thead = el("thead");
    thead.append(head);
    table.replaceChildren(thead, body);
    showStale();
    $("runs-count").textContent = `${state.runs.length} run${state.runs.length === 1 ? "" : "s"}` +
      (state.next ? " shown, more to load" : "");
    $("runs-more").hidden = !state.next;
    $("runs-all").hidden = !state.next;
    renderPicker();
    renderFilterKeys();
    updateActions();
    // The page's other views of these runs (the parallel coordinates) follow the table.
    emit(section, RUNS, {runs: state.runs, summaries: state.summaries, keys: pageKeys});
  };

  const toggleGroup = (key) => {
    if (!state.expanded.delete(key)) state.expanded.add(key);
    render();
  };
  let groupedBy = groupingState().group.by;
  onGrouping((g) => {
    if (g.by !== groupedBy) state.expanded.clear();  // another grouping: every group closed
    groupedBy = g.by;
    render();
  });

  // A column whose key the loaded runs may not carry (the page held a few keys' summaries, a
  // list cut a run's to 50) lists the runs again, with its key in summary_keys=.
  const carried = (key) => (state.carried ? state.carried.has(key)
    : state.runs.every((r) => !r.summary_cut || key in (r.summary || {})));
  const needKeys = (keys) => {
    for (const key of keys) state.extraKeys.add(key);
    if (keys.some((key) => !carried(key))) load();
  };
  const toggleColumn = (col, on) => {
    state.summaries = [...(state.summaries || []).filter((c) => c !== col), ...(on ? [col] : [])];
    saveColumns();
    if (on && !carried(splitSummary(col)[0])) load(); else render();
  };
  const renderPicker = () => fillPicker($("runs-column-picker"), state.runs, pageKeys, state.summaries, toggleColumn);
  if (pageScoped) bindColumnSearch($("runs-column-search"), (q) => searchKeys(String(scope.id), q), () => state.summaries, toggleColumn);

  // The builder's key suggestions: the loaded runs' params and metrics (any key may be typed).
  const renderFilterKeys = () => {
    const list = $("runs-filter-keys");
    list.replaceChildren(...filterKeys([...state.runs, keysRun]).map((k) => { const o = el("option"); o.value = k; return o; }));
  };

  const selectedIds = () => state.runs.filter((r) => state.selected.has(r.id)).map((r) => r.id);
  const updateActions = () => {
    const n = selectedIds().length;
    $("runs-selected-count").textContent = `${n} selected`;
    $("runs-compare").disabled = n < 1;
    for (const id of /** @type {const} */ (["runs-tag-selected", "runs-delete"])) if ($(id)) $(id).disabled = n < 1;
  };

  // --- loading ----------------------------------------------------------------------------

  const asked = () => new Set([...(state.summaries || []).map((c) => splitSummary(c)[0]), ...state.extraKeys]);
  const query = (cursor) => {
    const params = new URLSearchParams(/** @type {Record<string, string>} */ ({[scope.key]: scope.id, sort: state.sort, limit: String(PAGE)}));
    const status = $("runs-status").value;
    const tag = $("runs-tag").value.trim();
    const text = $("runs-filter").value.trim();
    if (status) params.append("status", status);
    if (tag) params.append("tag", tag);
    if (text) params.append("filter", text);
    // A list carries 50 summaries a run (train/ and val/ first), the experiment page's none
    // (summary_first=0): the chosen columns' keys, and those asked for besides, it names.
    for (const key of asked()) params.append("summary_keys", key);
    if (pageScoped) params.set("summary_first", "0");
    if (cursor) params.set("cursor", cursor);
    return api.runs(params);
  };

  // Until the reader picks, once some run has logged a metric (a page loaded before the first
  // point gets its columns with the first refresh that brings one).
  const pickDefaultSummaries = () => {
    const keys = summaryKeys([...state.runs, keysRun]);
    if (state.summaries === null && keys.length) state.summaries = defaultSummaries(keys, section.dataset.defaultSummary, keyCounts(state.runs));
  };

  let loading = 0; // answers of a superseded request are dropped
  let held = readHeld(document); // the page's copy of the first page (lib/first_page.js): once
  // more: the next page after those loaded; all: every page after (following `next`).
  const load = async (more = false, all = false) => {
    const ticket = ++loading;
    section.setAttribute("aria-busy", "true");
    let runs = more ? state.runs : [];
    let cursor = more ? state.next : null;
    let r;
    do {
      const p = new URL(query(), location.origin).searchParams;
      const copy = cursor ? null : usable(held, {sort: state.sort, keys: p.getAll("summary_keys"),
                                                 filtered: ["status", "tag", "filter"].some((k) => p.has(k))});
      held = null;
      if (!more) state.carried = copy ? copy.keys : pageScoped ? asked() : null;
      r = copy ? {ok: true, body: copy} : await call("GET", query(cursor));
      if (ticket !== loading) return;
      if (!r.ok) break;
      runs = [...runs, ...r.body.runs];
      cursor = r.body.next;
    } while (all && cursor);
    section.removeAttribute("aria-busy");
    if (!r.ok) {
      // No stale rows under the message: a refused filter lists nothing, and says why.
      state.runs = [];
      state.next = null;
      render();
      showError(r.status === 422 ? `Refused: ${refusal(r.body) || errorText(r.body)}`
        : `Could not list the runs: ${errorText(r.body)}`);
      section.dataset.loaded = String(ticket);
      return;
    }
    showError("");
    state.runs = runs;
    state.next = cursor;
    if (state.newest === Infinity) state.newest = Math.max(0, ...runs.map((run) => run.id));
    pickDefaultSummaries();
    render();
    section.dataset.loaded = String(ticket);
  };

  // --- actions ----------------------------------------------------------------------------

  $("runs-filters").addEventListener("submit", (event) => { event.preventDefault(); load(); });
  $("runs-status").addEventListener("change", () => load());
  $("runs-filter-add").addEventListener("click", () => {
    const key = $("runs-filter-key").value.trim();
    const value = $("runs-filter-value").value;
    if (!key || !value.trim()) { showError("Pick a key and type a value first."); return; }
    $("runs-filter").value = append($("runs-filter").value, condition(key, $("runs-filter-op").value, value));
    $("runs-filter-value").value = "";
    load();
  });
  $("runs-more").addEventListener("click", () => load(true));
  $("runs-all").addEventListener("click", () => load(true, true));
  $("runs-compare").addEventListener("click", () => {
    const ids = selectedIds();
    if (ids.length) window.location.assign(pages.compare(ids));
  });
  $("runs-tag-selected")?.addEventListener("click", async () => {
    const tag = $("runs-tag-input").value.trim();
    if (!tag) { showError("Type the tag to add first."); $("runs-tag-input").focus(); return; }
    showError(""); showNotice("");
    const failed = [];
    for (const run of state.runs.filter((r) => state.selected.has(r.id))) {
      const tags = [...new Set([...(run.tags || []), tag])];
      const r = await call("PATCH", api.run(run.id), {tags});
      if (!r.ok) failed.push(`run ${run.id}: ${failureText(r)}`);
    }
    await load();  // listed again first: a successful listing clears the error box
    if (failed.length) showError(`Not tagged: ${failed.join("; ")}`);
    else showNotice(`Tagged ${selectedIds().length} run(s) "${tag}".`);
  });
  $("runs-delete")?.addEventListener("click", async () => {
    const ids = selectedIds();
    if (!ids.length) return;
    if (!confirm(`Delete ${ids.length} run(s) (${ids.map((i) => `run ${i}`).join(", ")})? ` +
                 "Their metrics, logs, files and checkpoints are removed for good.")) return;
    showError(""); showNotice("");
    const failed = [];
    let freed = 0;
    let deleted = 0;
    for (const id of ids) {
      const result = await deleteObject(api.run(id));
      if (result.ok) { deleted += 1; freed += result.freed; state.selected.delete(id); }
      else failed.push(`run ${id}: ${result.error}`);
    }
    await load();  // listed again first: a successful listing clears the error box
    if (deleted) showNotice(`Deleted ${deleted} run(s): ${fmtBytes(freed)} freed.`);
    if (failed.length) showError(`Not deleted: ${failed.join("; ")}`);
  });

  // The parallel coordinates' brush: its runs highlighted here, and selected on request (then
  // compared, tagged or deleted like runs ticked by hand).
  listen(section, RUNS_HIGHLIGHT, ({ids}) => {
    state.highlight = ids ? new Set(ids) : null;
    for (const tr of /** @type {NodeListOf<HTMLTableRowElement>} */ (table.querySelectorAll("tbody tr[data-run-id]"))) {
      const id = Number(tr.dataset.runId);
      tr.classList.toggle("brushed", Boolean(state.highlight) && /** @type {Set<number>} */ (state.highlight).has(id));
      tr.classList.toggle("brushed-out", Boolean(state.highlight) && !/** @type {Set<number>} */ (state.highlight).has(id));
    }
  });
  listen(section, RUNS_SELECT, ({ids}) => {
    state.selected = new Set(ids);
    render();
  });
  // Live: while a run is active the curves poll the runs list (experiment_curves.js; on a
  // sweep's page sweep.js, with the sweep's runs); each answer refreshes the loaded rows
  // (status, summaries) in place, and a run not loaded yet lists the runs again (with this
  // table's sort and filters).
  // While the server does not answer (experiment_curves.js polls it), the statuses shown are
  // the last it confirmed: marked stale, with a note, until it answers again.
  const showStale = () => {
    markStale([...table.querySelectorAll("tbody .badge[class*='status-']")], state.lostSince);
    const note = $("runs-link");
    note.hidden = !state.lostSince;
    note.textContent = state.lostSince ? `${lostText(state.lostSince)}: statuses as of then.` : "";
  };
  listen(document, RUNS_LINK, ({lostSince}) => {
    state.lostSince = lostSince;
    showStale();
  });
  listen(document, RUNS_REFRESHED, ({runs}) => {
    if (section.getAttribute("aria-busy") === "true") return;
    const fresh = new Map(runs.map((r) => [r.id, r]));
    const newest = Math.max(0, ...fresh.keys());
    if (newest > state.newest) { state.newest = newest; load(); return; }
    // the curves' list carries a few keys' summaries: the table's others are kept as they were
    state.runs = state.runs.map((r) => { const f = fresh.get(r.id); return f ? {...f, summary: {...r.summary, ...f.summary}} : r; });
    pickDefaultSummaries();
    render();
  });
  // The parallel coordinates' metric: its key's summaries (asked for when not carried).
  listen(section, RUNS_NEED, ({keys}) => needKeys(keys));
  // "Show seed" (lib/seed.js): the seed columns come or go.
  listen(document, SEED_SHOWN, () => render());

  // Saved views (saved_views.js) read and restore the grouping ({group: {by, band}}: the
  // table's and the curves' one state, grouping.js), the filters, the sort and the columns.
  register({get: groupingState, set: setGrouping});
  register({
    get: () => ({
      filter: {text: $("runs-filter").value.trim(), status: $("runs-status").value, tag: $("runs-tag").value.trim()},
      sort: state.sort,
      columns: state.summaries,
    }),
    set: (view) => {
      const filter = view.filter || {};
      $("runs-filter").value = filter.text || "";
      $("runs-status").value = filter.status || "";
      $("runs-tag").value = filter.tag || "";
      if (view.sort) state.sort = view.sort;
      if (Array.isArray(view.columns)) state.summaries = view.columns;
      load();
    },
  });

  load();
})();
