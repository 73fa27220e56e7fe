// The "Delete run" / "Delete experiment" buttons: a button with data-delete-url asks for
// confirmation, sends DELETE with the CSRF header and says how much disk was freed (the
// X-Freed-Bytes header of the 204), then offers the way back (the page's object is gone).
// lib/api.js deleteObject is the one DELETE call (the runs table's "Delete" uses it too).
import {deleteObject} from "./lib/api.js";
import {showFailure} from "./lib/dom.js";
import {fmtBytes} from "./lib/format.js";

// Wires every such button of the page, once (a module runs once however often imported).
export const mountDeleteButtons = () => {
  const show = (id, text) => {
    const el = document.getElementById(id);
    if (!el) return null;
    el.textContent = text;
    el.hidden = false;
    return el;
  };
  /** @type {NodeListOf<HTMLButtonElement>} */ (document.querySelectorAll("button[data-delete-url]")).forEach((button) => {
    button.addEventListener("click", async () => {
      const what = button.dataset.deleteWhat;
      if (!confirm(`Delete ${what}? Its metrics, logs, files and checkpoints are removed for good.`)) return;
      button.disabled = true;
      const errorBox = document.getElementById("delete-error");
      showFailure(errorBox);
      const result = await deleteObject(button.dataset.deleteUrl);
      if (!result.ok) {
        button.disabled = false;
        showFailure(errorBox, "Could not delete", result.error);
        return;
      }
      const done = show("delete-done", `Deleted ${what}: ${fmtBytes(result.freed)} freed. `);
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
};
mountDeleteButtons();
