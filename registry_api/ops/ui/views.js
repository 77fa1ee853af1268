// The operators' views beyond the status cards and the jobs list (app.js): one job with its
// actions, one run, and the dead letters (the ledger's dead runs) with their replay. Chosen by the URL's fragment —
// #job/<tenant>/<job id>, #run/<run key>, #dlq — so a view can be linked and reloaded. Uses
// app.js's helpers ($, getJson, postJson, cell, instant, Refused, lock). Every value from the
// server goes in as text. Actions that change more than one run (backfill, delete, replay) ask
// for confirmation in the page first; each POST carries the CSRF token (postJson).
"use strict";

const REPLAY_POLL_MS = 1000;
let currentView = { name: "status" };
let pendingConfirm = null; // what the confirmation box runs when confirmed

function jobHash(tenant, jobId) {
  return "#job/" + encodeURIComponent(tenant) + "/" + encodeURIComponent(jobId);
}

function runHash(key) {
  return "#run/" + encodeURIComponent(key);
}

function viewLink(hash, text) {
  const a = document.createElement("a");
  a.href = hash;
  a.textContent = text;
  return a;
}

function parseHash() {
  const parts = location.hash.slice(1).split("/");
  try {
    if (parts[0] === "job" && parts.length === 3) {
      return { name: "job", tenant: decodeURIComponent(parts[1]), jobId: decodeURIComponent(parts[2]) };
    }
    if (parts[0] === "run" && parts.length === 2) {
      return { name: "run", key: decodeURIComponent(parts[1]) };
    }
  } catch (_) { /* a malformed fragment: the status view */ }
  if (parts[0] === "dlq") return { name: "dlq" };
  return { name: "status" };
}

function fieldRows(table, pairs) {
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const [label, value] of pairs) {
    const tr = document.createElement("tr");
    cell(tr, label);
    const td = cell(tr, "");
    if (value instanceof Node) td.appendChild(value); else td.textContent = value == null ? "—" : String(value);
    body.appendChild(tr);
  }
}

function showView() {
  currentView = parseHash();
  document.body.dataset.view = currentView.name;
  for (const id of ["job-view", "run-view", "dlq-view"]) $(id).hidden = id !== currentView.name + "-view";
  $("nav-status").className = currentView.name === "dlq" ? "" : "current";
  $("nav-dlq").className = currentView.name === "dlq" ? "current" : "";
  hideConfirm();
  if (!sessionStorage.getItem(KEY_ITEM)) return; // locked: unlock() loads the view
  if (currentView.name === "job") { $("job-message").textContent = ""; loadJob(); }
  if (currentView.name === "run") loadRun();
  if (currentView.name === "dlq" && !$("dlq").tBodies[0].rows.length) loadLetters();
}

// Called by app.js's refresh every few seconds: the job and run views follow the database.
async function refreshView() {
  if (currentView.name === "job") await loadJob();
  if (currentView.name === "run") await loadRun();
}

function failed(where, err) {
  if (err instanceof Refused) { lock(err.message); return; }
  where.textContent = err.message;
}

// --- one job ------------------------------------------------------------------------------

function jobPath(view) {
  return "/v1/ops/jobs/" + encodeURIComponent(view.tenant) + "/" + encodeURIComponent(view.jobId);
}

async function loadJob() {
  const view = currentView;
  try {
    const job = await getJson(jobPath(view));
    if (currentView !== view) return;
    renderJob(job);
  } catch (err) {
    if (currentView === view) failed($("job-message"), err);
  }
}

function renderJob(job) {
  const doc = job.document;
  $("job-title").textContent = job.job;
  $("job-status").textContent = job.status + " · version " + job.version;
  const note = job.pause_note;
  $("job-note").hidden = !note;
  $("job-note").textContent = note ? "Paused by " + note.by + " at " + instant(note.at) + ": " + note.reason : "";
  fieldRows($("job-fields"), [
    ["schedule", doc.schedule || (doc.at ? "once at " + instant(doc.at) : "—")],
    ["zone", doc.timezone],
    ["runs", doc.handler ? "handler " + doc.handler : "HTTP " + (doc.target ? doc.target.method + " " + doc.target.url : "")],
    ["priority", doc.priority],
    ["next run", instant(job.next_run_at)],
    ["shard", job.shard_id],
    ["created", instant(job.created_at)],
    ["updated", instant(job.updated_at)],
  ]);
  $("job-pause").disabled = job.status !== "active" && job.status !== "paused";
  $("job-pause").textContent = job.status === "paused" ? "Update note" : "Pause";
  $("job-resume").disabled = job.status !== "paused";
  $("job-trigger").disabled = job.status === "completed";
  renderPreview(job.preview);
  const runs = $("job-runs").tBodies[0];
  runs.replaceChildren();
  for (const r of job.runs) {
    const tr = document.createElement("tr");
    cell(tr, instant(r.scheduled_at), "when");
    cell(tr, "", "id").appendChild(viewLink(runHash(r.run_key), r.run_key));
    cell(tr, r.status);
    cell(tr, String(r.attempt), "num");
    const err = cell(tr, r.last_error || "", "err");
    err.title = r.last_error || "";
    runs.appendChild(tr);
  }
  const audit = $("job-audit").tBodies[0];
  audit.replaceChildren();
  for (const a of job.audit) {
    const tr = document.createElement("tr");
    cell(tr, instant(a.at), "when");
    cell(tr, a.operator);
    cell(tr, a.action);
    cell(tr, a.result);
    cell(tr, a.detail || "");
    audit.appendChild(tr);
  }
  $("job-document").textContent = JSON.stringify(doc, null, 2);
  document.body.dataset.jobLoads = String(Number(document.body.dataset.jobLoads || 0) + 1);
}

function renderPreview(preview) {
  const list = $("job-preview");
  list.replaceChildren();
  $("job-misfire").textContent = "";
  $("job-preview-zone").textContent = "";
  if (!preview) return;
  $("job-preview-zone").textContent = "in " + preview.timezone + (preview.resolved ? " · " + preview.resolved : "");
  for (const o of preview.occurrences) {
    const li = document.createElement("li");
    li.textContent = instant(o.at) + " · " + o.local + " " + o.abbreviation + " (" + o.offset + ")";
    for (const r of o.reasons) {
      const why = document.createElement("div");
      why.className = "why";
      why.textContent = r.rule + ": " + r.text;
      li.appendChild(why);
    }
    list.appendChild(li);
  }
  if (!preview.occurrences.length) {
    const li = document.createElement("li");
    li.textContent = "none: the job will not run again";
    list.appendChild(li);
  }
  if (preview.misfire) $("job-misfire").textContent = preview.misfire.rule + ": " + preview.misfire.text;
}

async function jobAction(action, body, button) {
  const view = currentView;
  if (button) button.disabled = true;
  try {
    const done = await postJson(jobPath(view) + "/" + action, body);
    $("job-message").textContent = describe(action, done);
    await loadJob();
    return done;
  } catch (err) {
    failed($("job-message"), err);
    return null;
  } finally {
    if (button) button.disabled = false;
  }
}

function describe(action, done) {
  if (action === "trigger") return (done.created ? "triggered " : "already triggered ") + done.run_key;
  if (action === "backfill") {
    return (done.dry_run ? "would create " : "created ") + done.runs + " runs of " + done.occurrences +
      " occurrences (" + done.existing + " have one already)" + (done.first ? ", " + done.first + " … " + done.last : "");
  }
  return done.job + ": " + done.result + (done.version != null ? " (version " + done.version + ")" : "");
}

function confirmFirst(text, run) {
  pendingConfirm = run;
  $("job-confirm-text").textContent = text;
  $("job-confirm").hidden = false;
}

function hideConfirm() {
  pendingConfirm = null;
  $("job-confirm").hidden = true;
  $("replay-confirm").hidden = true;
}

function wireJob() {
  $("job-pause").addEventListener("click", () => {
    const note = $("pause-note").value.trim();
    jobAction("pause", note ? { note } : undefined, $("job-pause")).then((done) => {
      if (done) $("pause-note").value = "";
    });
  });
  $("job-resume").addEventListener("click", () => jobAction("resume", undefined, $("job-resume")));
  $("job-trigger").addEventListener("click", () => jobAction("trigger", undefined, $("job-trigger")));
  $("job-backfill-count").addEventListener("click", async () => {
    const window_ = { from: $("backfill-from").value.trim(), to: $("backfill-to").value.trim() };
    const counted = await jobAction("backfill", { ...window_, dry_run: true }, $("job-backfill-count"));
    if (!counted) return;
    if (!counted.runs) { $("job-message").textContent = describe("backfill", counted) + ": nothing to do"; return; }
    confirmFirst("Create " + counted.runs + " backfill runs of " + currentView.tenant + "/" + currentView.jobId +
      " (" + window_.from + " … " + window_.to + ")?", () => jobAction("backfill", { ...window_, dry_run: false }));
  });
  $("job-delete").addEventListener("click", () => {
    confirmFirst("Delete " + currentView.tenant + "/" + currentView.jobId +
      "? Its future runs are not scheduled any more.", () => jobAction("delete"));
  });
  $("job-confirm-yes").addEventListener("click", () => {
    const run = pendingConfirm;
    hideConfirm();
    if (run) run();
  });
  $("job-confirm-no").addEventListener("click", hideConfirm);
}

// --- one run ------------------------------------------------------------------------------

async function loadRun() {
  const view = currentView;
  try {
    const run = await getJson("/v1/ops/runs/" + encodeURIComponent(view.key));
    if (currentView !== view) return;
    renderRun(run);
  } catch (err) {
    if (currentView === view) failed($("run-status"), err);
  }
}

function renderRun(run) {
  $("run-title").textContent = run.run_key;
  $("run-status").textContent = run.status + " · attempt " + run.attempt + " of " + run.max_attempts;
  const slash = run.job.indexOf("/");
  $("run-job-link").href = jobHash(run.job.slice(0, slash), run.job.slice(slash + 1));
  fieldRows($("run-fields"), [
    ["job", run.job + (run.job_status ? " (" + run.job_status + ")" : " (gone)")],
    ["scheduled at", instant(run.scheduled_at)],
    ["origin", run.origin],
    ["priority", run.priority],
    ["shard · epoch", run.shard_id + " · " + run.epoch],
    ["worker", run.worker],
    ["created", instant(run.created_at)],
    ["published", instant(run.published_at)],
    ["started", instant(run.started_at)],
    ["finished", instant(run.finished_at)],
    ["retry at", instant(run.retry_at)],
    ["lease until", instant(run.lease_until)],
    ["last error", run.last_error],
    ["skip reason", run.skip_reason],
  ]);
  const body = $("run-replays").tBodies[0];
  body.replaceChildren();
  for (const r of run.replays) {
    const tr = document.createElement("tr");
    cell(tr, "#" + r.audit_id, "num");
    cell(tr, instant(r.at), "when");
    cell(tr, r.operator);
    cell(tr, r.outcome);
    cell(tr, r.reason || "");
    body.appendChild(tr);
  }
  $("run-replays-none").hidden = run.replays.length > 0;
  document.body.dataset.runLoads = String(Number(document.body.dataset.runLoads || 0) + 1);
}

// --- dead letters -------------------------------------------------------------------------

function letterFilters() {
  return {
    tenant: $("d-tenant").value.trim(),
    job: $("d-job").value.trim(),
    error: $("d-error").value.trim(),
    since: $("d-since").value.trim(),
  };
}

async function loadLetters() {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(letterFilters())) if (value) params.set(name, value);
  $("dlq-count").textContent = "reading…";
  try {
    const data = await getJson("/v1/ops/dead-letters?" + params.toString());
    const body = $("dlq").tBodies[0];
    body.replaceChildren();
    for (const d of data.items) {
      const tr = document.createElement("tr");
      cell(tr, instant(d.dead_at), "when");
      cell(tr, "", "id").appendChild(viewLink(runHash(d.run_key), d.run_key));
      cell(tr, String(d.attempts), "num");
      const err = cell(tr, d.error, "err");
      err.title = d.error;
      body.appendChild(tr);
    }
    const matching = data.matching + (data.matching_capped ? "+" : "");
    $("dlq-count").textContent = matching + " match" +
      (data.matching > data.items.length ? ", the oldest " + data.items.length + " shown" : "");
    document.body.dataset.dlqLoads = String(Number(document.body.dataset.dlqLoads || 0) + 1);
  } catch (err) {
    failed($("dlq-count"), err);
  }
}

function replayBody(dryRun) {
  const body = { ...letterFilters(), dry_run: dryRun };
  for (const name of Object.keys(body)) if (body[name] === "") delete body[name];
  const rate = $("replay-rate").value.trim();
  if (rate) body.rate = rate;
  const attempts = $("replay-attempts").value.trim();
  if (attempts) body.attempts = Number(attempts);
  return body;
}

async function dryRun() {
  $("replay-message").textContent = "checking…";
  hideConfirm();
  try {
    const report = await postJson("/v1/ops/dead-letters/replay", replayBody(true));
    const summary = "would replay " + report.replayed + ", skip " + report.skipped + ", refuse " +
      report.refused + " of " + report.selected + " selected";
    $("replay-message").textContent = summary + " (dry run: nothing changed)";
    if (report.replayed > 0) {
      $("replay-confirm-text").textContent = "Replay " + report.replayed + " dead runs" +
        ($("replay-rate").value.trim() ? " at " + $("replay-rate").value.trim() : "") + "?";
      $("replay-confirm").hidden = false;
    }
  } catch (err) {
    failed($("replay-message"), err);
  }
}

async function replayNow() {
  hideConfirm();
  try {
    const started = await postJson("/v1/ops/dead-letters/replay", replayBody(false));
    $("replay-message").textContent = "replay #" + started.audit_id + " started: " + started.selected + " selected";
    followReplay(started.audit_id);
  } catch (err) {
    failed($("replay-message"), err);
  }
}

async function followReplay(id) {
  try {
    const entry = await getJson("/v1/ops/replays/" + id);
    const p = entry.progress;
    if (p && p.running) {
      $("replay-message").textContent = "replay #" + id + ": " + p.done + " of " + p.total + " done…";
      setTimeout(() => followReplay(id), REPLAY_POLL_MS);
      return;
    }
    $("replay-message").textContent = "replay #" + id + " " + entry.outcome + ": replayed " + entry.replayed +
      ", skipped " + entry.skipped + ", refused " + entry.refused + " of " + entry.selected + " (operator " + entry.operator + ")";
    document.body.dataset.replayDone = String(id);
  } catch (err) {
    failed($("replay-message"), err);
  }
}

function wireLetters() {
  $("dlq-filter").addEventListener("submit", (event) => { event.preventDefault(); loadLetters(); });
  $("replay-dry").addEventListener("click", dryRun);
  $("replay-yes").addEventListener("click", replayNow);
  $("replay-no").addEventListener("click", hideConfirm);
}

document.addEventListener("DOMContentLoaded", () => {
  wireJob();
  wireLetters();
  window.addEventListener("hashchange", showView);
  showView();
});
