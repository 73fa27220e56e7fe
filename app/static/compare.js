// The compare page: apply the picked runs, and overlay each metric's curves, one trace per run.
"use strict";
(() => {
  const picker = document.getElementById("compare-picker");
  if (picker) {
    // ?runs=1,2 rather than ?run=1&run=2: shorter, and the form works without JS too.
    picker.addEventListener("submit", (event) => {
      event.preventDefault();
      const ids = [...picker.querySelectorAll('input[name="run"]:checked')].map((el) => el.value);
      window.location.assign(ids.length ? `/compare?runs=${ids.join(",")}` : "/compare");
    });
  }

  const charts = document.getElementById("compare-charts");
  if (!charts) return;
  const status = document.getElementById("compare-status");
  const runIds = charts.dataset.runs.split(",").filter(Boolean);
  const COLORS = ["#2456d6", "#d6452b", "#1f8a4c", "#8e44ad", "#b7791f",
                  "#17a2b8", "#e83e8c", "#495057", "#6f42c1", "#20c997"];
  const MAX_POINTS = 2000;

  // The server's chart boxes, in key order, into one box per key group (ty.keyGroup), each a
  // grid of as many columns as the screen holds: the run page's layout.
  const byGroup = new Map();
  for (const div of [...charts.querySelectorAll(".metric-chart")]) {
    const group = ty.keyGroup(div.dataset.key);
    if (!byGroup.has(group)) byGroup.set(group, []);
    byGroup.get(group).push(div);
  }
  charts.replaceChildren(...[...byGroup.keys()].sort(ty.compareGroups).map((group) => {
    const box = document.createElement("div");
    box.className = "chart-group";
    box.dataset.group = group;
    const title = document.createElement("h3");
    title.textContent = ty.groupTitle(group);
    const grid = document.createElement("div");
    grid.className = "chart-grid";
    grid.append(...byGroup.get(group).sort((a, b) => ty.compareKeys(a.dataset.key, b.dataset.key)));
    box.append(title, grid);
    return box;
  }));

  const plot = (div, traces) => {
    div.textContent = "";
    const layout = {
      title: {text: ty.plotlyText(div.dataset.key), font: {size: 14}, x: 0.02, xanchor: "left"},
      margin: {l: 50, r: 16, t: 40, b: 32},
      xaxis: {hoverformat: "d"},
      hovermode: "x unified",
      legend: {orientation: "h", x: 1, xanchor: "right", y: 1.02, yanchor: "bottom"},
      showlegend: true,
    };
    return Plotly.newPlot(div, traces, layout, {responsive: true, displaylogo: false});
  };

  const load = async () => {
    if (typeof Plotly === "undefined") {
      status.textContent = "The chart library did not load; reload the page.";
      return;
    }
    const results = await Promise.all(runIds.map((id) =>
      ty.api("GET", `/api/runs/${id}/metrics?max_points=${MAX_POINTS}`)));
    const failed = [];
    const series = results.map((r, i) => {
      if (!r.ok) failed.push(`run ${runIds[i]}: ${ty.errorText(r.body)}`);
      return r.ok ? r.body.series : {};
    });
    await Promise.all([...charts.querySelectorAll(".metric-chart")].map((div) => {
      const traces = [];
      runIds.forEach((id, i) => {
        const s = series[i][div.dataset.key];
        if (!s) return;
        traces.push({x: s.step, y: s.value, name: `run ${id}`, type: "scatter", mode: "lines",
                     line: {color: COLORS[i % COLORS.length], width: 1.5}});
      });
      return plot(div, traces);
    }));
    status.textContent = failed.length
      ? `Some curves could not be loaded (${failed.join("; ")}). Reload to try again.`
      : `${runIds.length} run${runIds.length === 1 ? "" : "s"}, up to ${MAX_POINTS} points per curve (spikes kept). Drag to zoom, double-click to reset.`;
    status.classList.toggle("form-error", failed.length > 0);
  };

  load().catch((err) => {
    status.textContent = `The curves could not be drawn: ${err}. Reload to try again.`;
    status.classList.add("form-error");
  });
})();
