// Run on every page (templates/base.html): the server renders times as <time datetime="...">
// elements in UTC (app/pages.py `when`, readable without scripts); shown here in the
// reader's locale and time zone, with the UTC time in the title (lib/dom.js showTime). The
// keyboard shortcuts (`?` lists them) are installed here too.
// What the pages share lives in lib/ (statuses, formatting, API calls and URLs, the run's
// event stream) and is imported where used: no page sets a global.
import {showTime} from "./lib/dom.js";
import {mlflowTarget} from "./lib/mlflow_links.js";
import {install as installShortcuts} from "./lib/shortcuts.js";

// An MLflow UI link (the client's "View run at .../#/experiments/2/runs/63") lands on its page.
const mlflowPage = mlflowTarget(location.hash);
if (mlflowPage) location.replace(mlflowPage);

for (const el of document.querySelectorAll("time[datetime]")) showTime(el, el.getAttribute("datetime"));
installShortcuts();

// Under 600 px the top bar's links sit behind one Menu button (app.css).
const menu = document.getElementById("menu-toggle");
if (menu) {
  menu.addEventListener("click", () => {
    const open = /** @type {HTMLElement} */ (menu.closest(".topbar")).classList.toggle("open");
    menu.setAttribute("aria-expanded", String(open));
  });
}
