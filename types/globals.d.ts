// Globals the front-end's modules read that no module declares, for TypeScript's checker
// (tsconfig.json; `make js-check`). Not served: the browser never sees this file.

/** uPlot: the chart library, a classic script the page loads before our modules
 * (templates/_charts.html), read by app/static/chart.js only. */
declare const uPlot: any;
