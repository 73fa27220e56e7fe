// The MLflow UI's links, as MLflow's client prints them ("View run at
// <tracking uri>/#/experiments/2/runs/63"): torchyard serves MLflow's API at its root, so such a
// link opens torchyard's root page with a fragment; common.js sends the reader on to the page
// it names (an MLflow experiment or run id is torchyard's: app/mlflow).

/**
 * The torchyard page an MLflow UI fragment names, or null for any other fragment.
 * @param {string} hash location.hash, with its "#"
 * @returns {string | null}
 */
export function mlflowTarget(hash) {
  const run = /^#\/experiments\/\d+\/runs\/(\d+)(?:[/?].*)?$/.exec(hash);
  if (run) return `/runs/${run[1]}`;
  const experiment = /^#\/experiments\/(\d+)(?:[/?].*)?$/.exec(hash);
  return experiment ? `/experiments/${experiment[1]}` : null;
}
