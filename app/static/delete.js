// The "Delete run" / "Delete experiment" buttons: a button with data-delete-url asks for
// confirmation, sends DELETE with the CSRF header and says how much disk was freed (the
// X-Freed-Bytes header of the 204), then offers the way back (the page's object is gone).
// ty.deleteObject is the one DELETE call (the runs table's "Delete" uses it for each run).
"use strict";
window.ty = window.ty || {};
ty.fmtSize = (n) => {
  for (const [unit, scale] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (n >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
  }
  return `${n} bytes`;
};
// DELETE `url` with the CSRF header; resolves to {ok, freed (bytes), error (text or null)}.
ty.deleteObject = async (url) => {
  let response;
  try {
    response = await fetch(url, {
      method: "DELETE", credentials: "same-origin", headers: {"X-CSRF-Token": ty.csrf()},
    });
  } catch (err) {
    return {ok: false, freed: 0, error: `the server cannot be reached (${err})`};
  }
  if (response.status !== 204) {
    let body = null;
    try { body = await response.json(); } catch (_) { /* not JSON */ }
    return {ok: false, freed: 0, error: ty.errorText(body)};
  }
  return {ok: true, freed: Number(response.headers.get("X-Freed-Bytes") || 0), error: null};
};
(() => {
  const show = (id, text) => {
    const el = document.getElementById(id);
    if (!el) return null;
    el.textContent = text;
    el.hidden = false;
    return el;
  };
  document.querySelectorAll("button[data-delete-url]").forEach((button) => {
    button.addEventListener("click", async () => {
      const what = button.dataset.deleteWhat;
      if (!confirm(`Delete ${what}? Its metrics, logs, files and checkpoints are removed for good.`)) return;
      button.disabled = true;
      const errorBox = document.getElementById("delete-error");
      if (errorBox) errorBox.hidden = true;
      const result = await ty.deleteObject(button.dataset.deleteUrl);
      if (!result.ok) {
        button.disabled = false;
        show("delete-error", `Could not delete: ${result.error}`);
        return;
      }
      const done = show("delete-done", `Deleted ${what}: ${ty.fmtSize(result.freed)} freed. `);
      if (done && button.dataset.afterUrl) {
        const back = document.createElement("a");
        back.href = button.dataset.afterUrl;
        back.id = "delete-back";
        back.textContent = button.dataset.afterText || "Back";
        done.append(back);
      }
      button.hidden = true;
    });
  });
})();
