// Keyboard shortcuts on every page (common.js installs them): `?` lists them, `/` goes to the
// page's search or filter box, `g` then a letter goes to a page. The table and the key
// resolution are pure (tests/js/shortcuts.test.js); `install` is the DOM part.

export const SHORTCUTS = [
  {keys: "?", label: "Show these shortcuts"},
  {keys: "/", label: "Search or filter on this page", focus: true},
  {keys: "g e", label: "Go to experiments", href: "/"},
  {keys: "g n", label: "Go to a new experiment", href: "/experiments/new"},
  {keys: "g c", label: "Go to compare", href: "/compare"},
  {keys: "g g", label: "Go to GPUs", href: "/gpus"},
  {keys: "g a", label: "Go to my account", href: "/account"},
];

// The shortcut that `key` completes after `pending` keys ("" or "g"): {shortcut} when one is
// complete, {pending} while a prefix is typed, {} when the keys mean nothing.
export function resolve(pending, key) {
  const typed = pending ? `${pending} ${key}` : key;
  const shortcut = SHORTCUTS.find((s) => s.keys === typed);
  if (shortcut) return {shortcut};
  if (SHORTCUTS.some((s) => s.keys.startsWith(`${typed} `))) return {pending: typed};
  return {};
}

// Keys typed into a field are the field's.
function typing(target) {
  return target instanceof HTMLElement &&
    (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

/** @returns {HTMLDialogElement} */
function helpDialog() {
  let dialog = /** @type {HTMLDialogElement | null} */ (document.getElementById("shortcuts"));
  if (dialog) return dialog;
  dialog = document.createElement("dialog");
  dialog.id = "shortcuts";
  dialog.setAttribute("aria-label", "Keyboard shortcuts");
  const title = document.createElement("h2");
  title.textContent = "Keyboard shortcuts";
  const table = document.createElement("table");
  for (const s of SHORTCUTS) {
    const row = table.insertRow();
    const keys = row.insertCell();
    for (const k of s.keys.split(" ")) {
      const kbd = document.createElement("kbd");
      kbd.textContent = k;
      keys.append(kbd, " ");
    }
    row.insertCell().textContent = s.label;
  }
  const close = document.createElement("button");
  close.type = "button";
  close.textContent = "Close";
  close.addEventListener("click", () => dialog.close());
  dialog.append(title, table, close);
  document.body.append(dialog);
  return dialog;
}

export function install(doc = document) {
  let pending = "";
  doc.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const found = resolve(pending, event.key);
    pending = found.pending || "";
    if (!found.shortcut) return;
    event.preventDefault();
    const s = found.shortcut;
    if (s.href) {
      window.location.assign(s.href);
    } else if (s.focus) {
      const box = /** @type {HTMLElement | null} */ (doc.querySelector("[data-shortcut=search], input[type=search]"));
      if (box) box.focus();
    } else {
      const dialog = helpDialog();
      if (dialog.open) dialog.close(); else dialog.showModal();
    }
  });
}
