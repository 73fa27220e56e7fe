// The experiment page's "Views": save the page's current state (filters, sort, columns,
// grouping, charts: lib/page_state.js) under a name, private or shared with the team; list,
// open, copy the link of, delete, and (the experiment's owner) make one the default. Opening
// `?view=ID` restores that view; with no `?view=` the experiment's default view is applied.
// Names and owners from the server reach the page as textContent, never as HTML.
import {call, deleteObject, errorText} from "./lib/api.js";
import {getState, setState} from "./lib/page_state.js";
import {api} from "./lib/urls.js";

(() => {
  const section = document.getElementById("views-section");
  if (!section) return;
  const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
  const experimentId = section.dataset.experimentId;
  const me = Number(section.dataset.userId);
  const mayDefault = section.dataset.mayDefault === "true";
  const el = (tag, text, cls) => {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  };
  const say = (id, text) => { $(id).textContent = text; $(id).hidden = !text; };
  const error = (text) => say("views-error", text);
  const notice = (text) => say("views-notice", text);
  const absolute = (url) => new URL(url, window.location.origin).href;

  const apply = (view, why) => {
    setState(view.state);
    section.dataset.applied = String(view.id);
    $("views-current").textContent = `${why}: “${view.name}” (${view.owner})`;
  };

  const button = (text, cls, onClick) => {
    const b = el("button", text, cls);
    b.type = "button";
    b.addEventListener("click", onClick);
    return b;
  };

  const render = (views) => {
    const list = $("views-list");
    list.replaceChildren();
    $("views-empty").hidden = views.length > 0;
    for (const view of views) {
      const li = el("li");
      li.dataset.viewId = String(view.id);
      const link = el("a", view.name, "view-open");
      link.href = view.url;
      li.append(link, " ", el("span", `by ${view.owner}`, "muted"));
      if (view.shared) li.append(" ", el("span", "shared", "badge"));
      if (view.is_default) li.append(" ", el("span", "default", "badge view-default"));
      li.append(" ", button("Copy link", "view-copy", async () => {
        const url = absolute(view.url);
        try { await navigator.clipboard.writeText(url); notice(`Link copied: ${url}`); }
        catch (_) { notice(`The link (copy it): ${url}`); }
      }));
      if (mayDefault && view.shared) {
        li.append(" ", button(view.is_default ? "No longer default" : "Make default", "view-default-toggle", async () => {
          const r = await call("PUT", api.viewDefault(view.id), {default: !view.is_default});
          if (!r.ok) { error(`Not changed: ${errorText(r.body)}`); return; }
          await refresh();
        }));
      }
      if (view.owner_id === me) {
        li.append(" ", button("Delete", "view-delete danger", async () => {
          if (!confirm(`Delete the view “${view.name}”?`)) return;
          const result = await deleteObject(api.view(view.id));
          if (!result.ok) { error(`Not deleted: ${result.error}`); return; }
          notice(`Deleted the view “${view.name}”.`);
          await refresh();
        }));
      }
      list.append(li);
    }
  };

  const refresh = async () => {
    const r = await call("GET", api.views({experiment_id: experimentId}));
    if (!r.ok) { error(`Could not list the views: ${errorText(r.body)}`); return null; }
    render(r.body);
    return r.body;
  };

  $("view-save-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    error(""); notice("");
    const name = /** @type {HTMLInputElement} */ ($("view-name")).value.trim();
    if (!name) { error("Name the view first."); $("view-name").focus(); return; }
    const body = {name, experiment_id: Number(experimentId), shared: /** @type {HTMLInputElement} */ ($("view-shared")).checked, state: getState()};
    const r = await call("POST", api.views(), body);
    if (!r.ok) { error(`Not saved: ${errorText(r.body)}`); return; }
    /** @type {HTMLInputElement} */ ($("view-name")).value = "";
    notice(`Saved “${name}”: ${absolute(r.body.url)}`);
    section.dataset.saved = String(r.body.id);
    await refresh();
  });

  const start = async () => {
    const asked = new URLSearchParams(window.location.search).get("view");
    const views = await refresh();
    if (asked) {
      const r = await call("GET", api.view(asked));
      if (r.ok) apply(r.body, "Showing the view");
      else error(`The view ${asked} cannot be opened: ${errorText(r.body)}`);
    } else {
      const fallback = (views || []).find((v) => v.is_default);
      if (fallback) apply(fallback, "Showing the experiment's default view");
    }
    section.dataset.ready = "true";
  };
  start();
})();
