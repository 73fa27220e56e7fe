// ESLint for the front-end (app/static: ES modules the browser loads as they are) and its
// unit tests (tests/js, run by `node --test`). `make js-check` runs it.
import js from "@eslint/js";
import globals from "globals";

// Every request of the pages goes through app/static/lib/api.js (the CSRF header, the cookie,
// one error shape): fetch, however it is reached, is refused anywhere else.
const FETCH = "requests go through app/static/lib/api.js (call, or send for a raw Response)";
const RAW_FETCH = [{name: "fetch", message: FETCH}, {name: "XMLHttpRequest", message: FETCH}];
const FETCH_PROPERTIES = ["window", "globalThis", "self"].flatMap((object) => [
  {object, property: "fetch", message: FETCH}, {object, property: "XMLHttpRequest", message: FETCH}]);
// The pages' DOM events are named once, in app/static/lib/events.js: a "ty:..." string anywhere
// else is an event declared nowhere.
const EVENT = "name the event with its constant from app/static/lib/events.js";
const EVENT_NAMES = [
  {selector: "Literal[value=/^ty:/]", message: EVENT},
  {selector: "TemplateElement[value.raw=/^ty:/]", message: EVENT},
];

export default [
  {ignores: [".venv*/**", "node_modules/**", "torchyard-data/**", "build/**", "dist/**"]},
  js.configs.recommended,
  {
    files: ["app/static/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      // uPlot: the chart library, a classic script the page loads before our modules
      // (templates/_charts.html), read by app/static/chart.js only.
      globals: {...globals.browser, uPlot: "readonly"},
    },
    rules: {
      "no-unused-vars": ["error", {args: "none", caughtErrors: "none"}],
      "no-implicit-globals": "error",
      "no-restricted-globals": ["error", "ty", "tyLive", "tyRunPrefetch", ...RAW_FETCH],
      "no-restricted-properties": ["error", {object: "window", property: "ty",
                                              message: "import from app/static/lib instead"},
                                   ...FETCH_PROPERTIES],
      "no-restricted-syntax": ["error", ...EVENT_NAMES],
      eqeqeq: ["error", "smart"],
      "prefer-const": "error",
      "no-var": "error",
    },
  },
  {
    // The two modules that own what the rules above keep to them.
    files: ["app/static/lib/api.js"],
    rules: {
      "no-restricted-globals": ["error", "ty", "tyLive", "tyRunPrefetch"],
      "no-restricted-properties": ["error", {object: "window", property: "ty",
                                              message: "import from app/static/lib instead"}],
    },
  },
  {files: ["app/static/lib/events.js"], rules: {"no-restricted-syntax": "off"}},
  {
    files: ["tests/js/**/*.js", "eslint.config.js"],
    languageOptions: {ecmaVersion: 2022, sourceType: "module", globals: {...globals.node}},
  },
];
