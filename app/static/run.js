// The run page: downsampled history first, then live points from the SSE stream, batched
// into at most one redraw per frame; zoom re-fetches the range at full resolution.
"use strict";
(() => {
  const root = document.getElementById("run");
  if (!root) return;
  const runId = Number(root.dataset.runId);
  const BUDGET = 4000;          // points per series in one view (the server keeps min and max)
  // With more charts than this, each is drawn only when scrolled near: a run with 100,000
  // keys otherwise built 100,000 charts at once (the browser froze for over a minute).
  const LAZY_AFTER = 24;
  // With that many, SHOW_STEP charts are shown at first (the first groups' first keys), and
  // each group with more has a button for its next SHOW_STEP.
  const SHOW_STEP = 200;
  // The stream's `after` goes in the URL: past this size it is left out (the stream then
  // resends what the page holds, dropped here as already held) instead of an oversized URL.
  const MAX_AFTER_CHARS = 8000;
  const LOG_CAP = 200 * 1024;   // characters kept in the log tail
  const FINISHED = new Set(["succeeded", "failed", "cancelled", "deleted"]);
  const $ = (id) => document.getElementById(id);
  window.tyLive = window.tyLive || [];

  const view = {smoothing: 0, logY: false, xMode: "step", t0: null};
  const charts = new Map();     // key -> chart state
  // A resumed run: its parent's curve up to the checkpoint's step is drawn first, lighter
  // (step x-axis only: the parent's wall times are not this run's).
  // The step is the checkpoint's; when its row is gone (retention), the step before this run's
  // first point.
  const parent = {id: Number(root.dataset.parentRun) || null,
                  step: root.dataset.parentStep ? Number(root.dataset.parentStep) : NaN};
  let parentSeries = {};        // key -> {step, value} of the parent, steps <= parent.step
  let status = root.dataset.status;
  const mayWrite = root.dataset.mayWrite === "true";
  const cancelButton = $("cancel-run");
  let times = {started: root.dataset.started, finished: root.dataset.finished};
  let logOffset = 0;
  let source = null;
  // The link to the server. `link`: "connecting" until the stream first opens, "up" while it is
  // open, "down" from its drop until it opens again, "closed" once the run finished. `lostSince`:
  // when the server last confirmed the status and attempt shown, while it has not since the link
  // dropped (null: confirmed). "live" shows only while the link is up, the run was confirmed since
  // and it is running: a page cut off from a stopped server never claims it.
  let link = "connecting";
  let lostSince = null;
  // A quiet stream still sends a ping every 10 s (app/runs/events.py PING_SECONDS): nothing
  // heard for SILENT_MS means the server is gone even without a connection reset.
  const SILENT_MS = 30000;
  let lastHeard = Date.now();

  // --- helpers ------------------------------------------------------------------------------
  const parseTime = ty.parseTime;
  const fmtBytes = (n) => n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KB`
    : `${(n / 1048576).toFixed(1)} MB`;

  const {lowerBound, emaState, emaPush, emaAll, decimate} = ty.series;

  // A new array: the chart keeps (and ty.plot.extend grows) the trace's own arrays.
  const xsOf = (d) => view.xMode === "time"
    ? d.time.map((t) => (t == null || view.t0 == null ? null : t - view.t0)) : d.step.slice();

  // --- charts -------------------------------------------------------------------------------
  // One box per key group (ty.keyGroup: the prefix before the first "/") with its grid of
  // charts, as many columns as the screen holds (CSS). With many keys, SHOW_STEP charts in all
  // are shown at first and each group has a button for its next SHOW_STEP: a page of 100,000
  // chart boxes took the browser seconds to lay out even undrawn.
  const groups = new Map();     // group -> {box, grid, shown, limit, hidden: [chart], more}
  let shownAtFirst = 0;         // charts placed under the page's first SHOW_STEP
  const groupBox = (group) => {
    let g = groups.get(group);
    if (g) return g;
    const {box, grid} = ty.chartGroup(group);
    const more = document.createElement("button");
    more.type = "button";
    more.className = "show-more";
    more.hidden = true;
    box.append(more);
    g = {box, grid, shown: 0, limit: 0, hidden: [], more};
    more.addEventListener("click", () => reveal(g));
    // In group order; groups mostly come in order (keys arrive sorted), so appending is the
    // common case (a search per new group over thousands was quadratic).
    const boxes = $("charts").children;
    const last = boxes[boxes.length - 1];
    const next = !last || ty.compareGroups(last.dataset.group, group) < 0 ? null
      : [...boxes].find((b) => ty.compareGroups(b.dataset.group, group) > 0);
    $("charts").insertBefore(box, next || null);
    groups.set(group, g);
    return g;
  };
  const updateMore = (g) => {
    const n = g.hidden.length;
    g.more.hidden = n === 0;
    g.more.textContent = `Show ${Math.min(SHOW_STEP, n)} more (${n} keys not shown)`;
  };
  const reveal = (g) => {
    g.limit = g.shown + SHOW_STEP;
    g.hidden.sort((a, b) => (a.key < b.key ? -1 : 1));
    for (const chart of g.hidden.splice(0, SHOW_STEP)) place(chart, g, true);
    updateMore(g);
  };

  const layoutFor = (key) => ({
    title: {text: key},
    xaxis: {title: {text: view.xMode === "time" ? "wall time (s)" : ty.stepTitle(key)},
            autorange: true},
    yaxis: {type: view.logY ? "log" : "linear", autorange: true},
  });

  // Trace 2 (after the raw and smoothed ones, which live updates address as 0 and 1).
  const parentTrace = (key) => {
    const p = parentSeries[key];
    // Not a system series: the parent's seconds are not this run's, nor training steps.
    if (!p || !p.step.length || view.xMode !== "step" || ty.isSystemKey(key)) return [];
    return [{mode: p.step.length < 60 ? "lines+markers" : "lines", name: `run ${parent.id} (parent)`,
             x: p.step.slice(), y: p.value.slice(), line: {width: 1.2, color: "#9aa3b2", dash: "dot"},
             opacity: 0.8, meta: "parent"}];
  };

  const tracesFor = (chart, d) => {
    const w = view.smoothing;
    chart.ema = emaState();
    const x = xsOf(d);
    const mode = d.step.length < 60 ? "lines+markers" : "lines";  // epoch-level series: few points
    return [
      {mode, name: chart.key, x, y: d.value.slice(), line: {width: 1.2, color: "#2456d6"},
       opacity: w > 0 ? 0.28 : 1},
      {mode: "lines", name: `${chart.key} (smoothed)`, x: x.slice(), y: emaAll(d.value, w, chart.ema),
       line: {width: 1.8, color: "#2456d6"}, visible: w > 0},
      ...parentTrace(chart.key),
    ];
  };

  const markCounts = (chart) => {
    chart.div.dataset.points = String(chart.div.data ? chart.div.data[0].x.length : 0);
    chart.div.dataset.updates = String(chart.updates);
  };

  // Plot `d` (overview or zoomed range) as the chart's data (kept for later when not drawn yet).
  const draw = (chart, d, keepRange) => {
    chart.shown = d;
    if (!chart.drawn) return;
    const layout = layoutFor(chart.key);
    if (keepRange && chart.div.layout) {
      layout.xaxis.range = chart.div.layout.xaxis.range; layout.xaxis.autorange = false;
      layout.yaxis.range = chart.div.layout.yaxis.range; layout.yaxis.autorange = false;
    }
    ty.plot.react(chart.div, tracesFor(chart, d), layout);
    markCounts(chart);
  };

  // The first draw of a chart (at once, or when it scrolls near with many charts).
  const realize = (chart) => {
    if (chart.drawn) return;
    chart.drawn = true;
    chart.div.classList.remove("lazy");
    draw(chart, chart.shown, false);
    ty.plot.onRelayout(chart.div, (ev) => onRelayout(chart, ev));
  };
  let observer = null;
  const drawWhenNear = (chart) => {
    if (!observer) {
      observer = new IntersectionObserver((entries) => {
        for (const e of entries) {
          if (!e.isIntersecting) continue;
          observer.unobserve(e.target);
          const c = charts.get(e.target.dataset.key);
          if (c) realize(c);
        }
      }, {rootMargin: "600px 0px"});
    }
    chart.div.classList.add("lazy");
    observer.observe(chart.div);
  };

  const addChart = (key, d, lazy) => {
    const div = document.createElement("div");
    div.className = "metric-chart";
    div.dataset.key = key;
    div.dataset.points = "0";
    div.dataset.updates = "0";
    div.setAttribute("role", "img");
    div.setAttribute("aria-label", `chart of ${key}`);
    const chart = {key, div, data: d, shown: d, pending: null, updates: 0, zoom: 0,
                   ema: emaState(), drawn: false};
    charts.set(key, chart);
    if (view.t0 == null && d.time.length) view.t0 = d.time[0];
    const g = groupBox(ty.keyGroup(key));
    if (!lazy || g.shown < g.limit || shownAtFirst < SHOW_STEP) {
      if (lazy && g.shown >= g.limit) shownAtFirst += 1;
      place(chart, g, lazy);
    } else {
      g.hidden.push(chart);
      updateMore(g);
    }
    $("charts-empty").hidden = true;
    return chart;
  };

  // Into the group's grid, in key order.
  const place = (chart, g, lazy) => {
    const grid = g.grid;
    // Keys mostly come in order: appending is the common case (a search per key over
    // 100,000 charts was quadratic).
    const last = grid.lastElementChild;
    const next = !last || last.dataset.key < chart.key ? null
      : [...grid.children].find((c) => c.dataset.key > chart.key);
    grid.insertBefore(chart.div, next || null);
    g.shown += 1;
    if (lazy) drawWhenNear(chart); else realize(chart);
  };

  // --- zoom: full resolution inside the range, overview back on autoscale --------------------
  const onRelayout = async (chart, ev) => {
    if (ev["xaxis.autorange"] === true) {
      chart.zoom += 1;
      if (chart.shown !== chart.data) draw(chart, chart.data, false);
      return;
    }
    const lo = ev["xaxis.range[0]"] ?? (ev["xaxis.range"] || [])[0];
    const hi = ev["xaxis.range[1]"] ?? (ev["xaxis.range"] || [])[1];
    if (lo === undefined || hi === undefined) return;
    // x -> step through the overview (so the same code serves the time axis).
    const d = chart.data, xs = xsOf(d);
    const i0 = Math.max(0, lowerBound(xs, Number(lo)) - 1);
    const i1 = Math.min(d.step.length - 1, lowerBound(xs, Number(hi)));
    if (i1 < 0 || !d.step.length) return;
    const stepMin = d.step[i0], stepMax = d.step[i1];
    const token = ++chart.zoom;
    const params = new URLSearchParams({keys: chart.key, max_points: BUDGET, step_min: stepMin,
                                        step_max: stepMax, with_time: "true"});
    const r = await ty.api("GET", `/api/runs/${runId}/metrics?${params}`);
    if (token !== chart.zoom) return;  // a newer zoom or a reset won
    if (!r.ok) { showChartsError(`Zoom failed: ${ty.errorText(r.body)}`); return; }
    const s = r.body.series[chart.key];
    if (s) draw(chart, {step: s.step, value: s.value, time: s.time || []}, true);
  };

  // --- live points, batched ----------------------------------------------------------------
  let flushQueued = false;
  const queueFlush = () => {
    if (flushQueued) return;
    flushQueued = true;
    const run = () => { if (flushQueued) { flushQueued = false; flush(); } };
    requestAnimationFrame(run);
    setTimeout(run, 100);  // rAF does not fire in a hidden tab
  };

  const flush = () => {
    for (const chart of charts.values()) {
      const p = chart.pending;
      if (!p) continue;
      chart.pending = null;
      const d = chart.data;
      for (let i = 0; i < p.step.length; i++) {
        d.step.push(p.step[i]); d.value.push(p.value[i]); d.time.push(p.time[i]);
      }
      if (!chart.drawn) {  // kept for its first draw
        if (d.step.length > 3 * BUDGET) chart.data = decimate(d, BUDGET);
        chart.shown = chart.data;
        continue;
      }
      if (chart.shown === d && d.step.length > 3 * BUDGET) {
        chart.data = decimate(d, BUDGET);  // keeps each bucket's min and max
        chart.updates += 1;
        draw(chart, chart.data, false);
        continue;
      }
      const x = xsOf(p);
      const y = p.value;
      const ys = y.map((v) => emaPush(chart.ema, v, view.smoothing));
      if (chart.shown !== d) {
        chart.shown.step.push(...p.step); chart.shown.value.push(...p.value);
        chart.shown.time.push(...p.time);
      }
      ty.plot.extend(chart.div, {x: [x, x.slice()], y: [y.slice(), ys]}, [0, 1]);
      chart.updates += 1;
      markCounts(chart);
    }
  };

  const onMetrics = (series) => {
    const now = Date.now();
    for (const [key, s] of Object.entries(series)) {
      let chart = charts.get(key);
      const time = s.time || s.step.map(() => null);
      if (!chart) {
        if (view.t0 == null && time.length) view.t0 = time[0];
        chart = addChart(key, {step: [], value: [], time: []}, charts.size >= LAZY_AFTER);
      }
      const last = chart.pending ? chart.pending.step[chart.pending.step.length - 1]
        : chart.data.step[chart.data.step.length - 1];
      const p = chart.pending || (chart.pending = {step: [], value: [], time: []});
      for (let i = 0; i < s.step.length; i++) {
        if (last !== undefined && s.step[i] <= last) continue;  // already held
        p.step.push(s.step[i]); p.value.push(s.value[i]); p.time.push(time[i]);
        window.tyLive.push({key, step: s.step[i], receivedAt: now});
      }
      if (!p.step.length) chart.pending = null;
      if (key === "epoch") refreshCheckpointsSoon();
    }
    $("charts-loading").hidden = true;
    queueFlush();
  };

  // --- controls ------------------------------------------------------------------------------
  const redrawAll = () => { for (const c of charts.values()) { c.zoom += 1; draw(c, c.data, false); } };

  $("smoothing").addEventListener("input", (e) => {
    view.smoothing = Math.min(0.99, Math.max(0, Number(e.target.value)));
    $("smoothing-value").textContent = view.smoothing.toFixed(2);
    for (const c of charts.values()) {
      if (!c.drawn) continue;  // drawn later with the current smoothing
      c.ema = emaState();
      const ys = emaAll(c.div.data[0].y, view.smoothing, c.ema);
      c.div.data[0].opacity = view.smoothing > 0 ? 0.28 : 1;
      ty.plot.restyle(c.div, {y: [ys], visible: [view.smoothing > 0]}, [1]);
    }
  });
  $("log-scale").addEventListener("change", (e) => {
    view.logY = e.target.checked;
    for (const c of charts.values()) {
      if (!c.drawn) continue;
      ty.plot.relayout(c.div, {"yaxis.type": view.logY ? "log" : "linear", "yaxis.autorange": true});
    }
  });
  $("x-axis").addEventListener("change", (e) => { view.xMode = e.target.value; redrawAll(); });

  // --- status, timing, cancel ----------------------------------------------------------------
  const renderTiming = () => {
    ty.showTime($("run-started-time"), times.started);
    ty.showTime($("run-finished-time"), times.finished);
    const start = parseTime(times.started);
    const end = parseTime(times.finished) || (status === "running" ? new Date() : null);
    $("run-duration").textContent = start && end ? ty.fmtDuration((end - start) / 1000) : "–";
  };

  // The attempt as the server gave it ("2 of 3" with restarts allowed).
  const showAttempt = (attempt) => {
    const el = $("run-attempt");
    if (typeof attempt !== "number") return;
    el.dataset.attempt = String(attempt);
    const max = el.dataset.maxAttempts;
    el.textContent = max ? `${attempt} of ${max}` : String(attempt);
  };

  // What the page says about its link: the note by the charts ("live" or the loss), the banner,
  // and the facts that may have changed unseen (status, attempt, worker) marked stale.
  const renderLink = () => {
    const down = link === "down" && !FINISHED.has(status);
    const stale = down && lostSince !== null ? lostSince : null;
    const live = link === "up" && lostSince === null && status === "running";
    const noteEl = $("stream-note");
    noteEl.textContent = live ? "live" : down ? ty.LOST_TEXT : "";
    noteEl.classList.toggle("live", live);
    noteEl.dataset.link = live ? "live" : down ? "lost" : link;
    const banner = $("run-connection");
    banner.hidden = !down;
    banner.textContent = down ? `${ty.lostText(lostSince)}: the server does not answer. `
      + "The status, attempt and worker below are the last the server confirmed; "
      + "the page catches up once it is back." : "";
    ty.markStale([$("run-status"), $("run-attempt"), $("run-worker")], stale);
    const attemptNote = $("run-attempt-stale");
    attemptNote.hidden = !stale;
    attemptNote.textContent = stale ? `(last confirmed ${ty.clockText(stale)}; unconfirmed)` : "";
  };
  // The server said nothing it could be held to: from now on what is shown is as of then.
  const onLost = () => {
    if (lostSince === null) lostSince = new Date();
    renderLink();
  };
  // The server answered with the run's current state.
  const onConfirmed = () => {
    lostSince = null;
    renderLink();
  };

  const setStatus = (data) => {
    status = data.status;
    if ("attempt" in data) showAttempt(data.attempt);
    const badge = $("run-status");
    badge.className = `badge status-${status}`;
    badge.dataset.status = status;
    badge.textContent = status;
    root.dataset.status = status;
    if ("started_at" in data) times = {started: data.started_at, finished: data.finished_at};
    if (data.error) { $("run-error").textContent = data.error; $("run-error").hidden = false; }
    if (cancelButton) cancelButton.hidden = !(status === "queued" || status === "running");
    if (status !== "queued") $("run-queue-reason").hidden = true;
    if (charts.size === 0) {
      $("charts-empty").textContent = FINISHED.has(status)
        ? "This run logged no metrics." + (status === "failed" ? " See the error above and the output below." : "")
        : "No metrics yet — the run is queued/starting. Curves appear here as soon as it logs its first step.";
    }
    renderTiming();
  };

  // The run as the server has it now (after a reconnect too: the attempt may have moved on).
  const refreshRun = async () => {
    const r = await ty.api("GET", `/api/runs/${runId}`);
    if (!r.ok) { if (ty.serverDown(r)) onLost(); return; }
    $("run-worker").textContent = r.body.worker_host || "–";
    setStatus({status: r.body.status, started_at: r.body.started_at,
               finished_at: r.body.finished_at, error: r.body.error, attempt: r.body.attempt});
    onConfirmed();
    showNotices(r.body.notices || []);
    showQueueReason(r.body.queue_reason);
  };

  // Why a queued run waits: the scheduler's own words (the GPU page says the same), asked
  // for again while it waits, since they change as the runs ahead of it start and end.
  const showQueueReason = (reason) => {
    $("run-queue-reason-text").textContent = reason || "";
    $("run-queue-reason").hidden = !reason || status !== "queued";
  };
  setInterval(() => { if (status === "queued") refreshRun(); }, 3000);

  // What ingestion kept out of the run (lines skipped, a limit reached): text only.
  const showNotices = (lines) => {
    const list = $("run-notices");
    list.replaceChildren(...lines.map((line) => {
      const li = document.createElement("li");
      li.textContent = line;
      return li;
    }));
    list.hidden = lines.length === 0;
  };

  // Absent for a run the user may only read (another user's, or any for a viewer).
  if (cancelButton) cancelButton.addEventListener("click", async () => {
    if (!confirm(`Cancel run ${runId}?`)) return;
    const button = cancelButton;
    button.disabled = true;
    $("run-action-error").textContent = "";
    const r = await ty.api("POST", `/api/runs/${runId}/cancel`);
    button.disabled = false;
    if (!r.ok) { $("run-action-error").textContent = `Could not cancel: ${ty.errorText(r.body)}`; return; }
    setStatus({status: r.body.status, started_at: r.body.started_at,
               finished_at: r.body.finished_at, error: r.body.error});
    if (r.body.status === "running") $("run-action-error").textContent = "";
  });

  setInterval(() => { if (status === "running") renderTiming(); }, 1000);

  // --- checkpoints ---------------------------------------------------------------------------
  const loadCheckpoints = async () => {
    const r = await ty.api("GET", `/api/runs/${runId}/checkpoints`);
    const err = $("checkpoints-error");
    if (!r.ok) { err.textContent = `Could not list checkpoints: ${ty.errorText(r.body)}`; err.hidden = false; return; }
    err.hidden = true;
    const body = $("checkpoints").querySelector("tbody");
    const have = new Set([...body.children].map((tr) => tr.dataset.checkpoint));
    for (const c of r.body) {
      if (have.has(c.name)) continue;
      const tr = document.createElement("tr");
      tr.dataset.checkpoint = c.name;
      const href = `/api/runs/${runId}/checkpoints/${encodeURIComponent(c.name)}`;
      const cells = [c.name, c.epoch, c.step, fmtBytes(c.size_bytes), ty.timeEl(c.created_at)];
      cells.forEach((v, i) => {
        const td = document.createElement("td");
        if (v instanceof Node) td.append(v); else td.textContent = String(v);
        if (i >= 1 && i <= 3) td.className = "num";
        tr.appendChild(td);
      });
      const actions = document.createElement("td");
      const a = document.createElement("a");
      a.className = "download"; a.href = href; a.textContent = "Download";
      a.setAttribute("download", c.name);
      const resume = document.createElement("button");
      resume.type = "button"; resume.className = "resume";
      resume.textContent = "Resume from this checkpoint";
      resume.addEventListener("click", () => openResume(c));
      if (mayWrite) actions.append(a, " ", resume);
      else actions.append(a);
      tr.appendChild(actions);
      body.appendChild(tr);
    }
    $("checkpoints-empty").hidden = body.children.length > 0;
    $("checkpoints").hidden = body.children.length === 0;
  };
  let ckptTimer = null;
  const refreshCheckpointsSoon = () => {
    clearTimeout(ckptTimer);
    ckptTimer = setTimeout(loadCheckpoints, 500);  // the checkpoint lands just after "epoch"
  };
  setInterval(() => { if (status === "running") loadCheckpoints(); }, 10000);

  // The resume form (button.resume opens it for that checkpoint): epochs and lr fields for a
  // recipe's params and a JSON box for any other override; only values that differ from this
  // run's config are sent. A checkpoint that reached the epochs (final.pt) gets more prefilled:
  // the server refuses to resume it without (422 on params.epochs).
  const resumeForm = $("resume-form");
  let resumeName = null;
  const openResume = (c) => {
    if (!resumeForm) return;
    resumeName = c.name;
    $("resume-checkpoint").textContent = `${c.name} (epoch ${c.epoch}, step ${c.step})`;
    const epochs = $("resume-epochs");
    const current = Number(epochs.dataset.current);
    epochs.value = epochs.dataset.current && c.epoch >= current ? String(c.epoch + current) : epochs.dataset.current;
    $("resume-lr").value = $("resume-lr").dataset.current;
    $("resume-error").hidden = true;
    resumeForm.hidden = false;
    epochs.focus();
  };
  const resumeOverrides = () => {
    const text = $("resume-overrides").value.trim();
    const overrides = text ? JSON.parse(text) : {};
    if (!overrides || typeof overrides !== "object" || Array.isArray(overrides)) {
      throw new Error("the overrides must be a JSON object, e.g. {\"params\": {\"lr\": 0.01}}");
    }
    const params = {...(overrides.params || {})};
    for (const [id, key] of [["resume-epochs", "epochs"], ["resume-lr", "lr"]]) {
      const el = $(id);
      if (el.value.trim() !== "" && el.value !== el.dataset.current) {
        params[key] = Number.isFinite(Number(el.value)) ? Number(el.value) : el.value;
      }
    }
    if (Object.keys(params).length) overrides.params = params;
    return overrides;
  };
  if (resumeForm) {
    $("resume-cancel").addEventListener("click", () => { resumeForm.hidden = true; });
    resumeForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const err = $("resume-error");
      err.hidden = true;
      let overrides;
      try { overrides = resumeOverrides(); } catch (e) {
        err.textContent = `Overrides: ${e.message}`; err.hidden = false; return;
      }
      $("resume-submit").disabled = true;
      const r = await ty.api("POST", `/api/runs/${runId}/resume`, {checkpoint: resumeName, overrides});
      if (r.ok) { window.location.href = `/runs/${r.body.id}`; return; }
      $("resume-submit").disabled = false;
      err.textContent = `Could not resume from ${resumeName}: ${ty.errorText(r.body)}`;
      err.hidden = false;
    });
  }

  // --- log tail ------------------------------------------------------------------------------
  // Under torchrun every line of rank N starts with "[rankN]: "; a single process's lines are
  // all rank 0's. The filter loads the rank's tail with ?rank= (whole lines, and an offset at
  // a line boundary) and filters the live chunks here, holding back a partial last line.
  const logEl = $("log-tail");
  const rankSelect = $("log-rank");
  const nproc = Number(rankSelect.dataset.nproc || 1);
  let logRank = "";          // "" = every line
  let logPartial = "";       // the start of a line the stream has not finished yet
  const appendLog = (text) => {
    if (!text) return;
    const atBottom = logEl.scrollHeight - logEl.scrollTop - logEl.clientHeight < 24;
    let all = ty.collapseCarriageReturns(logEl.textContent + text);
    if (all.length > LOG_CAP) {
      all = all.slice(all.length - LOG_CAP);
      const nl = all.indexOf("\n");
      if (nl >= 0 && nl < 4096) all = all.slice(nl + 1);
    }
    logEl.textContent = all;
    if (atBottom) logEl.scrollTop = logEl.scrollHeight;
  };
  const filtering = () => logRank !== "" && nproc > 1;
  const onLogText = (text) => {
    if (!filtering()) { appendLog(text); return; }
    const all = logPartial + text;
    const cut = all.lastIndexOf("\n") + 1;
    logPartial = all.slice(cut);
    const prefix = `[rank${logRank}]: `;
    appendLog(all.slice(0, cut).split("\n").filter((l) => l.startsWith(prefix))
      .map((l) => l + "\n").join(""));
  };
  const loadLog = async () => {
    try {
      const params = new URLSearchParams({tail: LOG_CAP});
      if (filtering()) params.set("rank", logRank);
      const response = await fetch(`/api/runs/${runId}/logs?${params}`, {credentials: "same-origin"});
      if (!response.ok) return;
      logOffset = Number(response.headers.get("X-Log-Size") || 0);
      appendLog(await response.text());
    } catch (_) { /* the stream will bring what follows */ }
  };
  rankSelect.addEventListener("change", async () => {
    logRank = rankSelect.value;
    logEl.dataset.rank = logRank;
    const live = source !== null;
    if (live) { source.close(); source = null; }  // reconnect from the new log position
    logEl.textContent = "";
    logPartial = "";
    await loadLog();
    if (live && !FINISHED.has(status)) connect();
  });

  // --- the stream ----------------------------------------------------------------------------
  const connect = () => {
    const after = {};
    for (const [key, c] of charts) {
      const steps = c.pending && c.pending.step.length ? c.pending.step : c.data.step;
      if (steps.length) after[key] = steps[steps.length - 1];
    }
    const afterText = JSON.stringify(after);
    const params = new URLSearchParams({log_offset: logOffset});
    if (afterText.length <= MAX_AFTER_CHARS) params.set("after", afterText);
    source = new EventSource(`/api/runs/${runId}/events?${params}`);
    for (const name of ["open", "metrics", "log", "status", "ping"]) {
      source.addEventListener(name, () => { lastHeard = Date.now(); });
    }
    // Open is not yet confirmation: the run is re-read first (its first status event or the
    // re-fetch), so "live" never shows for a run the server no longer runs.
    source.addEventListener("open", () => { link = "up"; renderLink(); refreshRun(); });
    source.addEventListener("metrics", (e) => onMetrics(JSON.parse(e.data).series));
    source.addEventListener("log", (e) => {
      const d = JSON.parse(e.data);
      if (typeof d.offset === "number") logOffset = d.offset;
      onLogText(d.text);
    });
    source.addEventListener("status", (e) => {
      const d = JSON.parse(e.data);
      setStatus(d);
      if (FINISHED.has(d.status)) { source.close(); source = null; link = "closed"; }
      onConfirmed();  // the stream's status event is the server's word (status and attempt)
      refreshRun();
      loadCheckpoints();
    });
    source.addEventListener("error", dropped);
  };
  // The stream dropped (an error, or silence): say so, and reconnect ourselves from what we
  // hold (no duplicates).
  const dropped = () => {
    if (!source) return;
    source.close();
    source = null;
    if (FINISHED.has(status)) return;
    link = "down";
    onLost();
    setTimeout(connect, 2000);
  };
  setInterval(() => { if (link === "up" && source && Date.now() - lastHeard > SILENT_MS) dropped(); }, 5000);

  const showChartsError = (text) => { const e = $("charts-error"); e.textContent = text; e.hidden = false; };

  // The parent's points up to the resume step; a parent that is gone or unreadable just
  // leaves its curve out.
  const loadParent = async () => {
    if (!parent.id || !Number.isFinite(parent.step)) return;
    try {
      const r = await fetch(`/api/runs/${parent.id}/metrics?max_points=${BUDGET}&step_max=${parent.step}`,
                            {credentials: "same-origin"});
      if (r.ok) parentSeries = (await r.json()).series || {};
    } catch (err) { /* drawn without it */ }
  };

  // --- start ---------------------------------------------------------------------------------
  const start = async () => {
    renderTiming();
    const logDone = loadLog();
    loadCheckpoints();
    let parentDone = loadParent();
    let body = null;
    try {
      const response = await (window.tyRunPrefetch ||
        fetch(`/api/runs/${runId}/metrics?max_points=${BUDGET}&with_time=true`, {credentials: "same-origin"}));
      body = await response.json();
      if (!response.ok) throw new Error(ty.errorText(body));
    } catch (err) {
      $("charts-loading").hidden = true;
      showChartsError(`Could not load the metrics: ${err.message || err}. Reload the page to try again.`);
    }
    if (parent.id && !Number.isFinite(parent.step) && body && body.series) {
      // The child's first training step (a loop, not Math.min(...): runs may have 100,000
      // keys); the worker's sys/ series count seconds, not steps.
      let first = Infinity;
      for (const [key, s] of Object.entries(body.series)) {
        if (!ty.isSystemKey(key) && s.step.length && s.step[0] < first) first = s.step[0];
      }
      if (first !== Infinity) { parent.step = first - 1; parentDone = loadParent(); }
    }
    await parentDone;
    if (body && body.series) {
      const series = Object.entries(body.series);
      for (const [, s] of series) {
        if (s.time && s.time.length && (view.t0 == null || s.time[0] < view.t0)) view.t0 = s.time[0];
      }
      series.sort(([a], [b]) => ty.compareKeys(a, b));
      const lazy = series.length > LAZY_AFTER;
      for (const [key, s] of series) {
        addChart(key, {step: s.step, value: s.value, time: s.time || []}, lazy);
      }
      $("charts-loading").hidden = true;
      $("charts-empty").hidden = charts.size > 0;
    }
    setStatus({status});
    await logDone;
    if (!FINISHED.has(status)) connect();
  };
  start();
})();
