// The run page's Files section: what the run wrote under its working directory, as a tree of
// folders (each downloadable as .tar.gz) and files, checkpoint-looking ones marked. Asked for
// again every 10 s while the run is not finished. Every name is set as text, never as HTML.
"use strict";
(() => {
  const section = document.getElementById("files");
  if (!section) return;
  const runId = section.dataset.runId;
  const tree = document.getElementById("files-tree");
  const empty = document.getElementById("files-empty");
  const finished = () => ["succeeded", "failed", "cancelled"].includes(
    document.getElementById("run-status")?.dataset.status);
  const fmtBytes = (n) => n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KB`
    : n < 1073741824 ? `${(n / 1048576).toFixed(1)} MB` : `${(n / 1073741824).toFixed(2)} GB`;
  const url = (path) => `/api/runs/${runId}/files/` + path.split("/").map(encodeURIComponent).join("/");

  const link = (path, text) => {
    const a = document.createElement("a");
    a.href = url(path);
    a.textContent = text;
    a.setAttribute("download", "");
    return a;
  };

  // {name: {files: [...], dirs: {...}}} from the flat list of paths
  const build = (files) => {
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
      li.title = `modified ${ty.fmtTime(f.modified_at)} (${ty.utcText(f.modified_at)})`;
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
    const res = await ty.api("GET", `/api/runs/${runId}/files`);
    if (res.ok && Array.isArray(res.body)) {
      const open = new Set([...tree.querySelectorAll("details[open]")].map((d) => d.dataset.path));
      tree.replaceChildren(render(build(res.body), "", open));
      empty.hidden = res.body.length > 0;
    }
    if (!finished()) setTimeout(load, 10000);
  };
  load();
})();
