// DOM helpers shared by the pages: times as <time> elements, form errors by their fields, a
// chart group's box (and the overlays' chart boxes arranged into them), and the "not
// confirmed since" marks of a page whose server went quiet.
import {errorText, failureText} from "./api.js";
import {clockText, compareGroups, compareKeys, fmtTime, groupTitle, keyGroup, parseTime, utcText} from "./format.js";

// An element the page's template has (typed so: a lookup that may miss checks the result).
/** @type {(id: string) => HTMLElement} */
export const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

// The one place a page says that an action failed (403, 409, 422, or the network): `box`, the
// alert next to the control that took it, shows "<what>: <why>", why being `r`'s failureText
// (a call's {status, body}) or text already made (deleteObject's error); no `r` clears it.
export const showFailure = (box, what, r) => {
  if (!box) return;
  const text = r ? `${what}: ${typeof r === "string" ? r : failureText(r)}` : "";
  box.textContent = text;
  box.hidden = !text;
};

// A <time> showing `iso` in the reader's locale, with the UTC time in its title.
export const showTime = (el, iso) => {
  const d = parseTime(iso);
  el.textContent = fmtTime(iso);
  if (d) { el.setAttribute("datetime", d.toISOString()); el.title = utcText(iso); }
  else { el.removeAttribute("datetime"); el.removeAttribute("title"); }
  return el;
};
export const timeEl = (iso) => showTime(document.createElement("time"), iso);

// A form's errors next to its fields. FastAPI's 422 body is [{loc: ["body", ...], msg}];
// `names(loc)` (loc without "body") lists the input names to try for one error, the first
// found wins and the first name labels an error no input takes, which goes to `formError`.
export const formErrors = (form, formError, names) => {
  const showFormError = (text) => {
    formError.hidden = false;
    formError.textContent = formError.textContent ? `${formError.textContent} ${text}` : text;
  };
  const clear = () => {
    form.querySelectorAll(".field-error").forEach((el) => el.remove());
    form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
    formError.hidden = true;
    formError.textContent = "";
  };
  const show = (body) => {
    if (!body || !Array.isArray(body.detail)) {
      showFormError(errorText(body));
      return;
    }
    let first = null;
    for (const err of body.detail) {
      const candidates = names(err.loc.slice(err.loc[0] === "body" ? 1 : 0).map(String));
      const field = candidates.find((name) => name && form.querySelector(`[name="${CSS.escape(name)}"]`));
      if (!field) {
        showFormError(`${candidates[0] || "form"}: ${err.msg}.`);
        continue;
      }
      const input = form.querySelector(`[name="${CSS.escape(field)}"]`);
      const note = document.createElement("span");
      note.className = "field-error";
      note.dataset.field = candidates[0];
      note.id = "error-" + /** @type {string} */ (note.dataset.field).replace(/\W/g, "-");
      note.textContent = err.msg;
      input.setAttribute("aria-invalid", "true");
      input.setAttribute("aria-errormessage", note.id);
      input.insertAdjacentElement("afterend", note);
      first = first || input;
    }
    if (first) first.focus();
  };
  return {clear, show, showFormError};
};

// A key group's box: its title and the grid its charts go in (run page, compare, overlays).
export const chartGroup = (group) => {
  const box = document.createElement("div");
  box.className = "chart-group";
  box.dataset.group = group;
  const title = document.createElement("h3");
  title.textContent = groupTitle(group);
  const grid = document.createElement("div");
  grid.className = "chart-grid";
  box.append(title, grid);
  return {box, grid};
};

// A page never claims what the server has not confirmed: marks each element as not confirmed
// since `since` (a Date), or clears the mark (`since` null): class and data-stale for styling
// and tests, a title that says since when (the element's own title is kept aside and put back).
export const markStale = (elements, since) => {
  for (const el of elements) {
    if (!el) continue;
    const was = el.dataset.stale === "true";
    el.classList.toggle("stale", Boolean(since));
    if (since) {
      if (!was) el.dataset.titleBefore = el.getAttribute("title") || "";
      el.dataset.stale = "true";
      el.title = `not confirmed by the server since ${clockText(since)}: the connection is lost`;
    } else if (was) {
      delete el.dataset.stale;
      if (el.dataset.titleBefore) el.title = el.dataset.titleBefore; else el.removeAttribute("title");
      delete el.dataset.titleBefore;
    }
  }
};

// Group the chart boxes under `container` (server-rendered or made by the caller) into the
// run page's layout: one box per key group (keyGroup), each a grid of charts.
export const arrange = (container) => {
  const byGroup = new Map();
  for (const div of [...container.querySelectorAll(".metric-chart")]) {
    const group = keyGroup(div.dataset.key);
    if (!byGroup.has(group)) byGroup.set(group, []);
    byGroup.get(group).push(div);
  }
  container.replaceChildren(...[...byGroup.keys()].sort(compareGroups).map((group) => {
    const {box, grid} = chartGroup(group);
    grid.append(...byGroup.get(group).sort((a, b) => compareKeys(a.dataset.key, b.dataset.key)));
    return box;
  }));
};

// A chart box for `key`, for the overlay to draw in.
export const chartDiv = (key) => {
  const div = document.createElement("div");
  div.className = "metric-chart";
  div.dataset.key = key;
  div.setAttribute("role", "img");
  div.setAttribute("aria-label", `${key} of every run`);
  return div;
};
