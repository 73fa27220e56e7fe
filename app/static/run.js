// The run page: its parts (charts, status, log, checkpoints and the other sections) fed by
// one stream of the run's events (lib/run_stream.js) instead of each polling the server.
// History first (the charts' downsampled history, the log's tail), then the stream from there.
import "./delete.js";
import {RunStream} from "./lib/run_stream.js";
import {isFinished} from "./lib/status.js";
import {api} from "./lib/urls.js";
import {mountCharts} from "./run/charts.js";
import {mountCheckpoints} from "./run/checkpoints.js";
import {mountEnvironment} from "./run/environment.js";
import {mountFiles} from "./run/files.js";
import {mountImages} from "./run/images.js";
import {mountLabel} from "./run/label.js";
import {mountLog} from "./run/log.js";
import {mountParams} from "./run/params.js";
import {mountStatus} from "./run/status.js";

// The stream's `after` goes in the URL: past this size it is left out (the stream then
// resends what the page holds, dropped by the charts as already held) instead of an
// oversized URL.
const MAX_AFTER_CHARS = 8000;

const start = async (root) => {
  const runId = Number(root.dataset.runId);
  const runStatus = () => root.dataset.status;  // kept current by run/status.js
  const charts = mountCharts(root, runId);
  const stream = new RunStream({
    finished: () => isFinished(runStatus()),
    // Asked at each (re)connect: from the last step held per key and the log's position.
    url: () => {
      const after = JSON.stringify(charts.after());
      return api.runEvents(runId, {log_offset: log.offset(),
                                   after: after.length <= MAX_AFTER_CHARS ? after : null});
    },
  });
  // The status subscribes first: a status event is shown before the parts refresh on it.
  const status = mountStatus(root, runId, stream, charts.charts);
  const log = mountLog(runId, stream, runStatus);
  stream.on("metrics", (data) => charts.onMetrics(data.series));
  const checkpoints = mountCheckpoints(root, runId, stream);
  mountEnvironment(stream);
  mountFiles(stream);
  mountParams(stream);
  mountImages(stream);
  mountLabel();

  const logDone = log.load();
  checkpoints.load();
  await charts.load();
  status.setStatus({status: runStatus()});  // what the charts' place says when it holds none
  await logDone;
  if (!isFinished(runStatus())) stream.connect();
};

const root = document.getElementById("run");
if (root) start(root);
