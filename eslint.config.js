// ESLint for the front-end (app/static: ES modules the browser loads as they are) and its
// unit tests (tests/js, run by `node --test`). `make js-check` runs it.
import js from "@eslint/js";
import globals from "globals";

export default [
  {ignores: [".venv/**", "node_modules/**", "torchyard-data/**", "build/**", "dist/**"]},
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
      "no-restricted-globals": ["error", "ty", "tyLive", "tyRunPrefetch"],
      "no-restricted-properties": ["error", {object: "window", property: "ty",
                                              message: "import from app/static/lib instead"}],
      eqeqeq: ["error", "smart"],
      "prefer-const": "error",
      "no-var": "error",
    },
  },
  {
    files: ["tests/js/**/*.js", "eslint.config.js"],
    languageOptions: {ecmaVersion: 2022, sourceType: "module", globals: {...globals.node}},
  },
];
