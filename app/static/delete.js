// The "Delete run" / "Delete experiment" buttons: a button with data-delete-url asks for
// confirmation, sends DELETE with the CSRF header and says how much disk was freed (the
// X-Freed-Bytes header of the 204), then offers the way back (the page's object is gone).
"use strict";
(() => {
  const fmtSize = (n) => {
    for (const [unit, scale] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
      if (n >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
    }
    return `${n} bytes`;
  };
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
      let response;
      try {
        response = await fetch(button.dataset.deleteUrl, {
          method: "DELETE", credentials: "same-origin", headers: {"X-CSRF-Token": ty.csrf()},
        });
      } catch (err) {
        button.disabled = false;
        show("delete-error", `Could not delete: the server cannot be reached (${err})`);
        return;
      }
      if (response.status !== 204) {
        button.disabled = false;
        let body = null;
        try { body = await response.json(); } catch (_) { /* not JSON */ }
        show("delete-error", `Could not delete: ${ty.errorText(body)}`);
        return;
      }
      const freed = Number(response.headers.get("X-Freed-Bytes") || 0);
      const done = show("delete-done", `Deleted ${what}: ${fmtSize(freed)} freed. `);
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
