// The new-experiment form's "Code" field: a picked folder or archive is packed (code_pack.js),
// uploaded to /api/code with a progress bar, and its digest put in the hidden `code` input that
// experiment_form.js sends as the config's `code`. Once the snapshot's files are known the
// script becomes a pick from its .py files (the select then carries name="script", so the
// server's 422 about `script` shows next to it).
import {errorText} from "./lib/api.js";
import {neededLeftOut, packCode, uploadCode} from "./code_pack.js";
(() => {
  const field = document.getElementById("code-field");
  if (!field) return;
  const codeInput = /** @type {HTMLInputElement} */ (document.getElementById("code"));
  const folderInput = /** @type {HTMLInputElement} */ (document.getElementById("code-folder"));
  const archiveInput = /** @type {HTMLInputElement} */ (document.getElementById("code-archive"));
  const clearButton = /** @type {HTMLElement} */ (document.getElementById("code-clear"));
  const progress = /** @type {HTMLProgressElement} */ (document.getElementById("code-progress"));
  const status = /** @type {HTMLElement} */ (document.getElementById("code-status"));
  const leftOutBox = /** @type {HTMLElement} */ (document.getElementById("code-left-out"));
  const needsBox = /** @type {HTMLElement} */ (document.getElementById("code-needs"));
  const scriptInput = /** @type {HTMLInputElement} */ (document.getElementById("script"));
  const scriptPick = /** @type {HTMLSelectElement} */ (document.getElementById("script-pick"));
  const scriptRoot = /** @type {HTMLElement} */ (document.getElementById("script-root"));
  const submitButton = /** @type {HTMLButtonElement} */ (document.getElementById("create-and-launch"));
  const scriptLabel = /** @type {HTMLLabelElement} */ (document.querySelector('label[for="script"]'));
  const MB = 1000 * 1000;
  const size = (n) => (n < MB ? `${(n / 1000).toFixed(1)} kB` : `${(n / MB).toFixed(1)} MB`);

  const say = (text, code) => {
    status.textContent = text;
    if (code) {
      const el = document.createElement("code");
      el.textContent = code;
      status.append(" ", el);
    }
  };
  const removeError = () => field.querySelectorAll(".field-error").forEach((el) => el.remove());

  // The script as a pick from the snapshot's Python files, or back to a free text field.
  const usePick = (files) => {
    const scripts = (files || []).filter((f) => f.endsWith(".py"));
    if (!scripts.length) {
      scriptPick.hidden = true;
      scriptPick.removeAttribute("name");
      scriptInput.hidden = false;
      scriptInput.name = "script";
      scriptLabel.htmlFor = "script";
      return;
    }
    const current = scriptInput.value.trim().replace(/^\.\//, "");
    const preferred = [current, "train.py", "main.py"].find((f) => scripts.includes(f))
      || scripts.find((f) => !f.includes("/")) || scripts[0];
    scriptPick.replaceChildren(...scripts.map((f) => new Option(f, f, false, f === preferred)));
    scriptInput.value = preferred;
    scriptInput.hidden = true;
    scriptInput.removeAttribute("name");
    scriptPick.hidden = false;
    scriptPick.name = "script";
    scriptLabel.htmlFor = "script-pick";
  };
  // The files the chosen script names that were left out for their size: said at once, in
  // the open, and asked about again when the form is sent (a run would not find them).
  /** @type {{leftOut: {path: string, reason: string, large?: boolean}[], texts: Record<string, string>}} */
  let snapshot = {leftOut: [], texts: {}};
  let needed = [];
  const checkNeeds = () => {
    const script = scriptInput.value.trim().replace(/^\.\//, "");
    needed = codeInput.value ? neededLeftOut(snapshot.texts[script] || "", snapshot.leftOut) : [];
    needsBox.textContent = needed.length
      ? `${script} names ${needed.map((i) => `${i.path} (${i.reason})`).join(", ")}: left out of the upload, ` +
        "the run will not find it. Make it smaller, or put it where the run reads it from (the workspace, a URL)."
      : "";
    needsBox.hidden = !needed.length;
    if (needed.length) /** @type {HTMLDetailsElement} */ (leftOutBox).open = true;
    field.dataset.needsLeftOut = needed.map((i) => i.path).join(",");
  };
  scriptPick.addEventListener("change", () => { scriptInput.value = scriptPick.value; checkNeeds(); });
  scriptInput.addEventListener("input", checkNeeds);
  const form = field.closest("form");
  document.addEventListener("submit", (event) => {
    if (event.target !== form || !needed.length) return;
    const names = needed.map((i) => i.path).join(", ");
    if (confirm(`${scriptInput.value} needs ${names}, left out of the upload for its size: the run will not find it. Launch anyway?`)) return;
    event.preventDefault();
    event.stopImmediatePropagation();
  }, true);

  const showLeftOut = (leftOut) => {
    const list = /** @type {HTMLElement} */ (leftOutBox.querySelector("ul"));
    list.replaceChildren(...leftOut.map((item) => {
      const li = document.createElement("li");
      li.textContent = `${item.path}: ${item.reason}`;
      return li;
    }));
    /** @type {HTMLElement} */ (leftOutBox.querySelector("summary")).textContent = `left out ${leftOut.length}`;
    leftOutBox.hidden = !leftOut.length;
  };

  const clear = () => {
    codeInput.value = "";
    folderInput.value = "";
    archiveInput.value = "";
    clearButton.hidden = true;
    progress.hidden = true;
    showLeftOut([]);
    snapshot = {leftOut: [], texts: {}};
    usePick(null);
    checkNeeds();
    scriptRoot.textContent = "the workspace ";
    const ws = document.createElement("code");
    ws.textContent = /** @type {string} */ (status.dataset.workspace);
    scriptRoot.append(ws);
    say("none: the script comes from the server's workspace", status.dataset.workspace);
  };
  clearButton.addEventListener("click", clear);

  const ship = async (input, label) => {
    removeError();
    codeInput.value = "";
    checkNeeds();
    submitButton.disabled = true;
    field.dataset.state = "packing";
    try {
      say(`Packing ${label}…`);
      let packed;
      try {
        packed = await packCode(input);
      } catch (err) {
        field.dataset.state = "error";
        say(`Cannot pack ${label}: ${err.message}`);
        return;
      }
      showLeftOut(packed.leftOut);
      progress.hidden = false;
      progress.max = packed.blob.size || 1;
      progress.value = 0;
      say(`Uploading ${packed.files.length} files (${size(packed.blob.size)})…`);
      const r = await uploadCode(packed.blob, (loaded, total) => {
        progress.max = total;
        progress.value = loaded;
      });
      progress.hidden = true;
      if (!r.ok) {
        field.dataset.state = "error";
        say(`The upload was refused (${r.status}): ${errorText(r.body)}`);
        return;
      }
      codeInput.value = r.body.digest;
      clearButton.hidden = false;
      field.dataset.state = "uploaded";
      field.dataset.files = JSON.stringify(packed.files);
      say(`${label}: ${packed.files.length} files, ${size(packed.blob.size)} compressed, stored as`,
          r.body.digest);
      scriptRoot.textContent = `the root of ${label}`;
      snapshot = {leftOut: packed.leftOut, texts: packed.texts};
      usePick(packed.files);
      checkNeeds();
    } finally {
      submitButton.disabled = false;
    }
  };
  folderInput.addEventListener("change", () => {
    if (!/** @type {FileList} */ (folderInput.files).length) return;
    archiveInput.value = "";
    const first = /** @type {FileList} */ (folderInput.files)[0].webkitRelativePath || "";
    ship(folderInput.files, `the folder ${first.split("/")[0] || ""}`.trim());
  });
  archiveInput.addEventListener("change", () => {
    if (!/** @type {FileList} */ (archiveInput.files).length) return;
    folderInput.value = "";
    ship(/** @type {FileList} */ (archiveInput.files)[0], /** @type {FileList} */ (archiveInput.files)[0].name);
  });
})();
