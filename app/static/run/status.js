// The run page's status: the badge, timing, attempt, worker, disk, notices, why a queued run
// waits, the Cancel button, and what the page says about its link to the server ("live", or
// the loss with the facts shown marked stale). Fed by the run's stream (lib/run_stream.js):
// its status events, and a re-read of the run on the stream's events (no timer of its own
// but the clock of the running duration).
import {call, serverDown} from "../lib/api.js";
import {$, markStale, showFailure, showTime, timeEl} from "../lib/dom.js";
import {LOST_TEXT, clockText, fmtBytes, fmtDuration, lostText, parseTime} from "../lib/format.js";
import {BUILDING, isActive, isFinished} from "../lib/status.js";
import {api} from "../lib/urls.js";

// How often a queued or running run is re-read on the stream's events (its queue reason,
// notices, worker and disk change without a status event).
const REREAD_MS = 3000;

export const mountStatus = (root, runId, stream, charts) => {
  let status = root.dataset.status;
  let times = {started: root.dataset.started, finished: root.dataset.finished,
               build: root.dataset.buildStarted, training: root.dataset.trainingStarted};
  let phase = root.dataset.phase || null;
  const cancelButton = /** @type {HTMLButtonElement | null} */ ($("cancel-run"));
  // `lostSince`: when the server last confirmed the status and attempt shown, while it has not
  // since the link dropped (null: confirmed). "live" shows only while the link is up, the run
  // was confirmed since and it is running: a page cut off from a stopped server never claims it.
  let lostSince = null;

  const renderTiming = () => {
    showTime($("run-started-time"), times.started);
    showTime($("run-finished-time"), times.finished);
    // Training's time from the job's start; the build's from its start to the job's (or to
    // the run's end when the build failed), as app/runs/state/phase.py counts them.
    const build = parseTime(times.build);
    const training = parseTime(times.training);
    const end = parseTime(times.finished) || (status === "running" ? new Date() : null);
    $("run-duration").textContent = training && end ? fmtDuration((/** @type {any} */ (end) - /** @type {any} */ (training)) / 1000) : "–";
    const buildEnd = training || end;
    $("run-build").textContent = build && buildEnd
      ? fmtDuration((/** @type {any} */ (buildEnd) - /** @type {any} */ (build)) / 1000) + (phase === BUILDING && status === "running" ? " (building)" : "")
      : "–";
  };

  // "Building environment: <pip's last line>" while the run's packages are installed.
  const showPhase = (data) => {
    if (!("phase" in data)) return;
    phase = data.phase;
    times = {...times, build: data.env_build_started_at, training: data.training_started_at};
    const building = phase === BUILDING && status === "running";
    $("run-phase-line").textContent = data.env_build_line || "starting pip";
    $("run-phase").hidden = !building;
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
    const link = stream.link;
    const down = link === "down" && !isFinished(status);
    const stale = down && lostSince !== null ? lostSince : null;
    const live = link === "up" && lostSince === null && status === "running";
    const noteEl = $("stream-note");
    noteEl.textContent = live ? "live" : down ? LOST_TEXT : "";
    noteEl.classList.toggle("live", live);
    noteEl.dataset.link = live ? "live" : down ? "lost" : link;
    const banner = $("run-connection");
    banner.hidden = !down;
    banner.textContent = down ? `${lostText(lostSince)}: the server does not answer. `
      + "The status, attempt and worker below are the last the server confirmed; "
      + "the page catches up once it is back." : "";
    markStale([$("run-status"), $("run-attempt"), $("run-worker")], stale);
    const attemptNote = $("run-attempt-stale");
    attemptNote.hidden = !stale;
    attemptNote.textContent = stale ? `(last confirmed ${clockText(stale)}; unconfirmed)` : "";
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
    if ("started_at" in data) times = {...times, started: data.started_at, finished: data.finished_at};
    showPhase(data);
    if (data.error) { $("run-error").textContent = data.error; $("run-error").hidden = false; }
    if (cancelButton) cancelButton.hidden = !isActive(status);
    if (status !== "queued") $("run-queue-reason").hidden = true;
    if (charts.size === 0) {
      $("charts-empty").textContent = isFinished(status)
        ? "This run logged no metrics." + (status === "failed" ? " See the error above and the output below." : "")
        : "No metrics yet — the run is queued/starting. Curves appear here as soon as it logs its first step.";
    }
    renderTiming();
  };

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

  // Why a queued run waits: the scheduler's own words (the GPU page says the same).
  const showQueueReason = (reason) => {
    $("run-queue-reason-text").textContent = reason || "";
    $("run-queue-reason").hidden = !reason || status !== "queued";
  };

  // The expected start beside the reason (app/gpus/estimate.py): a time and what it rests
  // on, or "no estimate" and why.
  const showEstimate = (start, basis) => {
    const time = $("run-estimate-time");
    if (start) time.replaceChildren(timeEl(start), " — ");
    else time.textContent = "";
    $("run-estimate-basis").textContent = basis || "";
    $("run-estimate").hidden = !basis;
  };

  // The run as the server has it now (after a reconnect too: the attempt may have moved on).
  const refreshRun = async () => {
    const r = await call("GET", api.run(runId));
    if (!r.ok) { if (serverDown(r)) onLost(); return; }
    $("run-worker").textContent = r.body.worker_host || "–";
    if (typeof r.body.disk_bytes === "number") $("run-disk").textContent = fmtBytes(r.body.disk_bytes);
    setStatus({status: r.body.status, started_at: r.body.started_at,
               finished_at: r.body.finished_at, error: r.body.error, attempt: r.body.attempt,
               phase: r.body.phase, env_build_line: r.body.env_build_line,
               env_build_started_at: r.body.env_build_started_at,
               training_started_at: r.body.training_started_at});
    onConfirmed();
    showNotices(r.body.notices || []);
    showQueueReason(r.body.queue_reason);
    showEstimate(r.body.estimated_start, r.body.estimate_basis);
  };

  // Absent for a run the user may only read (another user's, or any for a viewer).
  if (cancelButton) cancelButton.addEventListener("click", async () => {
    if (!confirm(`Cancel run ${runId}?`)) return;
    const button = cancelButton;
    button.disabled = true;
    $("run-action-error").textContent = "";
    const r = await call("POST", api.runCancel(runId));
    button.disabled = false;
    if (!r.ok) { showFailure($("run-action-error"), "Could not cancel", r); return; }
    setStatus({status: r.body.status, started_at: r.body.started_at,
               finished_at: r.body.finished_at, error: r.body.error});
    if (r.body.status === "running") $("run-action-error").textContent = "";
  });

  // The running duration counts up: a clock, not a question to the server.
  setInterval(() => { if (status === "running") renderTiming(); }, 1000);

  // Open is not yet confirmation: the run is re-read first, so "live" never shows for a run
  // the server no longer runs. A drop: what is shown is as of then.
  stream.on("link", (link) => {
    if (link === "down") onLost(); else renderLink();
    if (link === "up") refreshRun();
  });
  stream.on("status", (data) => {
    setStatus(data);
    onConfirmed();  // the stream's status event is the server's word (status and attempt)
  });
  // Re-read at once on a status event (its final notices and disk at the end), and on the
  // stream's other events at most every REREAD_MS.
  stream.refreshOn(refreshRun, REREAD_MS);

  renderTiming();
  return {setStatus};
};
