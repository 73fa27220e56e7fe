// A run's statuses as the server names them (app/runs/models.py RunStatus), and which of them
// are over: the one list every page asks. "deleted" is what a run's stream says last when the
// run is deleted while watched (app/runs/streams/events.py).
export const ACTIVE = new Set(["queued", "running"]);
export const FINISHED = new Set(["succeeded", "failed", "cancelled", "deleted"]);

// A running run's phase while its packages are installed (app/runs/state/phase.py BUILDING).
export const BUILDING = "building environment";

export const isActive = (status) => ACTIVE.has(status);
export const isFinished = (status) => FINISHED.has(status);

// How many of a status count (`{succeeded: 3, running: 1}`) are over: a sweep's progress.
export const finishedCount = (counts) => {
  let n = 0;
  for (const status of FINISHED) n += counts[status] || 0;
  return n;
};
