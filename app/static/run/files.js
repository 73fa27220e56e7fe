// The run page's Files section: what the run wrote under its working directory, as a tree of
// folders (each downloadable as .tar.gz) and files, checkpoint-looking ones marked. Asked for
// again on the run's stream events while it is live. Every name is set as text, never as HTML.
import {call} from "../lib/api.js";
import {fmtTime, fmtBytes, utcText} from "../lib/format.js";
import {api} from "../lib/urls.js";

const EVERY_MS = 10000;

export const mountFiles = (stream) => {
  const section = document.getElementById("files");
  if (!section) return;
  const runId = section.dataset.runId;
  const tree = /** @type {HTMLElement} */ (document.getElementById("files-tree"));
  const empty = /** @type {HTMLElement} */ (document.getElementById("files-empty"));
  const url = (path) => api.runFile(runId, path);

  const link = (path, text) => {
    const a = document.createElement("a");
    a.href = url(path);
    a.textContent = text;
    a.setAttribute("download", "");
    return a;
  };

  // {name: {files: [...], dirs: {...}}} from the flat list of paths
  /** @typedef {{dirs: Record<string, Dir>, files: Record<string, any>[]}} Dir */
  const build = (files) => {
    /** @type {Dir} */
    const root = {dirs: {}, files: []};
    for (const f of files) {
      const parts = f.path.split("/");
      let node = root;
      for (const part of parts.slice(0, -1)) node = node.dirs[part] ??= {dirs: {}, files: []};
      node.files.push({...f, name: parts[parts.length - 1]});
    }
    return root;
  };

  const render = (node, prefix, openOnes) => {
    const list = document.createElement("ul");
    list.className = "file-tree";
    for (const name of Object.keys(node.dirs).sort()) {
      const path = prefix + name;
      const li = document.createElement("li");
      const details = document.createElement("details");
      details.dataset.path = path;
      details.open = openOnes.has(path);
      const summary = document.createElement("summary");
      summary.append(`${name}/ `);
      if (name.startsWith("checkpoint-")) summary.append(badge());
      const archive = link(path, "download .tar.gz");
      archive.className = "muted";
      summary.append(" ", archive);
      details.append(summary, render(node.dirs[name], `${path}/`, openOnes));
      li.append(details);
      list.append(li);
    }
    for (const f of node.files) {
      const li = document.createElement("li");
      li.append(link(f.path, f.name), ` ${fmtBytes(f.size_bytes)} `);
      if (f.checkpoint) li.append(badge());
      li.title = `modified ${fmtTime(f.modified_at)} (${utcText(f.modified_at)})`;
      list.append(li);
    }
    return list;
  };

  const badge = () => {
    const b = document.createElement("span");
    b.className = "badge";
    b.textContent = "checkpoint";
    return b;
  };

  const load = async () => {
    const res = await call("GET", api.runFiles(runId));
    if (res.ok && Array.isArray(res.body)) {
      const open = new Set([.../** @type {NodeListOf<HTMLElement>} */ (tree.querySelectorAll("details[open]"))].map((d) => d.dataset.path));
      tree.replaceChildren(render(build(res.body), "", open));
      empty.hidden = res.body.length > 0;
    }
  };
  load();
  stream.refreshOn(load, EVERY_MS);
};
