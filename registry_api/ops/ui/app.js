// The tickwheel status page: polls the registry's /v1/ops/… endpoints with the operator key
// (kept in sessionStorage, sent only as a Bearer header) and draws what they return; the jobs
// view pages through jobs and pauses or resumes them (POSTs carry the CSRF token of
// /v1/ops/csrf). One job, one run and the dead letters are views.js's. No framework, no build
// step; every value from the server is put in the page as text (textContent, dataset), never
// as HTML.
"use strict";

const KEY_ITEM = "tickwheel.operatorKey";
const REFRESH_MS = 5000;
const MINUTES = 10;
const THROUGHPUT = [
  { field: "created", label: "created", color: "#2563eb" },
  { field: "published", label: "published", color: "#0d9488" },
  { field: "finished", label: "finished", color: "#9333ea" },
  { field: "dead", label: "dead", color: "#c0262d" },
];
const LAG = [
  { field: "lag_p50_ms", label: "p50", color: "#0d9488" },
  { field: "lag_p99_ms", label: "p99", color: "#d97706" },
];

const $ = (id) => document.getElementById(id);
let timer = null;

class Refused extends Error {}

async function getJson(path) {
  const key = sessionStorage.getItem(KEY_ITEM);
  const response = await fetch(path, {
    headers: { Authorization: "Bearer " + key, Accept: "application/json" },
    cache: "no-store",
    credentials: "omit",
  });
  let body = null;
  try { body = await response.json(); } catch (_) { /* not JSON: reported below */ }
  if (response.status === 401 || response.status === 403) {
    throw new Refused((body && body.detail) || "the key was refused (" + response.status + ")");
  }
  if (!response.ok) {
    throw new Error(path + ": " + ((body && body.detail) || "HTTP " + response.status));
  }
  return body;
}

function iso(ms) {
  return ms == null ? "—" : new Date(ms).toISOString().replace(".000Z", "Z");
}

function ago(ms, now) {
  if (ms == null) return "—";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 120) return s + " s ago";
  if (s < 7200) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function renderShards(data, now) {
  const body = $("shards").tBodies[0];
  body.replaceChildren();
  for (const s of data.items) {
    const tr = document.createElement("tr");
    tr.dataset.shard = String(s.shard);
    if (!s.owner) tr.className = "unled";
    cell(tr, String(s.shard), "num");
    cell(tr, s.owner || (s.epoch ? "(stepped down)" : "(never led)"));
    cell(tr, String(s.epoch), "num");
    cell(tr, s.since_ms == null ? "—" : iso(s.since_ms) + " (" + ago(s.since_ms, now) + ")");
    // A due job unclaimed for over a second means the shard's leader is not dispatching.
    const behind = cell(tr, s.behind_ms == null ? "—" : (s.behind_ms / 1000).toFixed(1) + " s", "num");
    if (s.behind_ms != null && s.behind_ms > 1000) behind.className = "num late";
    body.appendChild(tr);
  }
  $("shards-count").textContent = data.led + " of " + data.shards + " led";
  return data;
}

function renderDead(data) {
  const body = $("dead").tBodies[0];
  body.replaceChildren();
  for (const d of data.items) {
    const tr = document.createElement("tr");
    cell(tr, iso(d.dead_ms));
    cell(tr, "").appendChild(viewLink(runHash(d.run_key), d.run_key));
    cell(tr, String(d.attempt), "num");
    const err = cell(tr, d.last_error || "", "err");
    err.title = d.last_error || "";
    body.appendChild(tr);
  }
  $("dead-none").hidden = data.items.length > 0;
}

// --- the jobs view: one page of /v1/ops/jobs at a time, filtered on the server --------------

const JOBS_LIMIT = 50;
const CSRF_HEADER = "X-CSRF-Token";
// `after`: the cursor of the page shown (null: the first); `back`: the cursors before it.
const jobsView = { filters: {}, after: null, back: [], next: null };
let csrfToken = null;

async function csrf() {
  if (!csrfToken) csrfToken = (await getJson("/v1/ops/csrf")).token;
  return csrfToken;
}

// A POST that changes state: with the key and the CSRF token, and `payload` as JSON if given;
// a refused token (a restarted registry) is renewed once.
async function postJson(path, payload) {
  for (let attempt = 0; ; attempt++) {
    const token = await csrf();
    const headers = {
      Authorization: "Bearer " + sessionStorage.getItem(KEY_ITEM),
      Accept: "application/json",
      [CSRF_HEADER]: token,
    };
    if (payload !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method: "POST",
      headers,
      body: payload === undefined ? undefined : JSON.stringify(payload),
      cache: "no-store",
      credentials: "omit",
    });
    let body = null;
    try { body = await response.json(); } catch (_) { /* not JSON: reported below */ }
    if (response.status === 403 && body && body.error === "csrf" && attempt === 0) {
      csrfToken = null;
      continue;
    }
    if (response.status === 401 || (response.status === 403 && !(body && body.error === "csrf"))) {
      throw new Refused((body && body.detail) || "the key was refused (" + response.status + ")");
    }
    if (!response.ok) throw new Error((body && body.detail) || "HTTP " + response.status);
    return body;
  }
}

function jobsPath() {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(jobsView.filters)) {
    if (value) params.set(name, value);
  }
  if (jobsView.after) {
    params.set("after_tenant", jobsView.after.tenant);
    params.set("after_job", jobsView.after.job_id);
  }
  params.set("limit", String(JOBS_LIMIT));
  return "/v1/ops/jobs?" + params.toString();
}

// An ISO-8601 instant from the server, shorter: "2026-12-06 07:50:00Z".
function instant(text) {
  return text ? text.replace("T", " ").replace(/\.000Z$/, "Z") : "—";
}

function actionButton(job) {
  const action = job.status === "active" ? "pause" : job.status === "paused" ? "resume" : null;
  if (!action) return null;
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = action === "pause" ? "Pause" : "Resume";
  button.dataset.action = action;
  button.addEventListener("click", () => act(job, action, button));
  return button;
}

function renderJobs(data) {
  const body = $("jobs").tBodies[0];
  body.replaceChildren();
  for (const j of data.items) {
    const tr = document.createElement("tr");
    tr.dataset.tenant = j.tenant;
    tr.dataset.jobId = j.job_id;
    cell(tr, j.tenant);
    const idCell = cell(tr, "", "id");
    idCell.appendChild(viewLink(jobHash(j.tenant, j.job_id), j.job_id));
    cell(tr, j.kind === "once" ? "at " + instant(j.at) : j.schedule || "—");
    cell(tr, j.timezone);
    const status = cell(tr, j.status, "status-" + j.status);
    if (j.pause_note) status.title = "paused by " + j.pause_note.by + ": " + j.pause_note.reason;
    cell(tr, instant(j.next_run_at), "when");
    cell(tr, String(j.version), "num");
    const last = cell(tr, j.last_run ? j.last_run.status : "—", "last");
    if (j.last_run) last.title = "scheduled at " + instant(j.last_run.scheduled_at);
    const td = cell(tr, "", "act");
    const button = actionButton(j);
    if (button) td.appendChild(button);
    body.appendChild(tr);
  }
  jobsView.next = data.next;
  $("jobs-none").hidden = data.items.length > 0;
  $("jobs-next").disabled = !data.next;
  $("jobs-prev").disabled = jobsView.back.length === 0;
  $("jobs-first").disabled = !jobsView.after;
  $("jobs-count").textContent = "page " + (jobsView.back.length + 1) + ", " +
    data.items.length + " shown" + (data.next ? ", more on the next pages" : "");
  document.body.dataset.jobsLoads = String(Number(document.body.dataset.jobsLoads || 0) + 1);
}

async function loadJobs() {
  renderJobs(await getJson(jobsPath()));
}

async function showJobs(change) {
  try {
    change();
    await loadJobs();
  } catch (err) {
    if (err instanceof Refused) { lock(err.message); return; }
    $("jobs-message").textContent = "Could not load jobs: " + err.message;
  }
}

async function act(job, action, button) {
  button.disabled = true;
  const path = "/v1/ops/jobs/" + encodeURIComponent(job.tenant) + "/" +
    encodeURIComponent(job.job_id) + "/" + action;
  try {
    const done = await postJson(path);
    $("jobs-message").textContent = done.job + ": " + done.result + " (version " + done.version + ")";
    await loadJobs();
  } catch (err) {
    if (err instanceof Refused) { lock(err.message); return; }
    $("jobs-message").textContent = job.tenant + "/" + job.job_id + ": " + err.message;
    button.disabled = false;
  }
}

function wireJobs() {
  $("jobs-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    showJobs(() => {
      jobsView.filters = {
        tenant: $("f-tenant").value.trim(),
        status: $("f-status").value,
        handler: $("f-handler").value.trim(),
        q: $("f-text").value.trim(),
      };
      jobsView.after = null;
      jobsView.back = [];
    });
  });
  $("jobs-next").addEventListener("click", () => showJobs(() => {
    if (!jobsView.next) return;
    jobsView.back.push(jobsView.after);
    jobsView.after = jobsView.next;
  }));
  $("jobs-prev").addEventListener("click", () => showJobs(() => {
    if (jobsView.back.length) jobsView.after = jobsView.back.pop();
  }));
  $("jobs-first").addEventListener("click", () => showJobs(() => {
    jobsView.after = null;
    jobsView.back = [];
  }));
}

// A round grid step (1, 2 or 5 × 10^n) so that four steps cover `value`; whole numbers for
// counts.
function niceStep(value, whole) {
  const raw = Math.max(value / 4, whole ? 1 : 0.001);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const step of [1, 2, 5, 10]) {
    if (raw <= step * power) return step * power;
  }
  return 10 * power;
}

// Draws series (lines over time) on a canvas sized for the device's pixels. Returns how many
// points had a value, which the page also leaves on the canvas (data-points) for tests.
function drawChart(canvas, buckets, series, unit) {
  // The drawing buffer follows the displayed width and the device's pixels; the height is
  // the one the HTML gives, kept from the first draw.
  const ratio = window.devicePixelRatio || 1;
  if (!canvas.dataset.baseHeight) canvas.dataset.baseHeight = String(canvas.height);
  const w = canvas.clientWidth || 900;
  const h = Number(canvas.dataset.baseHeight);
  canvas.width = Math.round(w * ratio);
  canvas.height = Math.round(h * ratio);
  canvas.style.height = h + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  const pad = { left: 52, right: 12, top: 10, bottom: 24 };
  const plotW = w - pad.left - pad.right, plotH = h - pad.top - pad.bottom;
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, w, h);

  let top = 0, points = 0;
  for (const b of buckets) {
    for (const s of series) {
      const v = b[s.field];
      if (v != null) { top = Math.max(top, v); if (v > 0) points += 1; }
    }
  }
  const step = niceStep(top, unit === "");
  top = step * 4;
  const n = buckets.length;
  const x = (i) => pad.left + (n <= 1 ? 0 : (i * plotW) / (n - 1));
  const y = (v) => pad.top + plotH - (v / top) * plotH;

  ctx.font = "11px system-ui, sans-serif";
  ctx.strokeStyle = "#e4e7ec";
  ctx.fillStyle = "#6b7280";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let k = 0; k <= 4; k++) {
    const v = step * k;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(pad.left, yy); ctx.lineTo(w - pad.right, yy); ctx.stroke();
    const label = v >= 1000 ? +(v / 1000).toFixed(1) + "k" : String(+v.toFixed(3));
    ctx.fillText(label + (k === 4 && unit ? " " + unit : ""), pad.left - 6, yy);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (let i = 0; i < n; i += Math.max(1, Math.round(n / 6))) {
    const t = new Date(buckets[i].start_ms).toISOString().slice(11, 19);
    ctx.fillText(t, x(i), h - pad.bottom + 6);
  }

  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.fillStyle = s.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    let drawing = false;
    buckets.forEach((b, i) => {
      const v = b[s.field];
      if (v == null) { drawing = false; return; }
      if (drawing) ctx.lineTo(x(i), y(v)); else ctx.moveTo(x(i), y(v));
      drawing = true;
    });
    ctx.stroke();
    buckets.forEach((b, i) => {
      const v = b[s.field];
      if (v != null && v > 0) { ctx.beginPath(); ctx.arc(x(i), y(v), 2.2, 0, 2 * Math.PI); ctx.fill(); }
    });
  }
  canvas.dataset.points = String(points);
  return points;
}

function legend(id, series, buckets) {
  const box = $(id);
  box.replaceChildren();
  for (const s of series) {
    const span = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = s.color;
    span.appendChild(swatch);
    let total = 0, last = null;
    for (const b of buckets) { if (b[s.field] != null) { total += b[s.field]; last = b[s.field]; } }
    const figure = s.field.startsWith("lag")
      ? (last == null ? "—" : Math.round(last) + " ms (last)")
      : total + " in " + MINUTES + " min";
    span.appendChild(document.createTextNode(s.label + ": " + figure));
    box.appendChild(span);
  }
}

function renderSummary(shards, throughput) {
  const box = $("summary");
  box.replaceChildren();
  // The last minute: the five complete buckets before the current one, and the current one.
  const recent = throughput.buckets.slice(-6);
  const perS = recent.reduce((a, b) => a + b.published, 0) / 60;
  const p99 = recent.map((b) => b.lag_p99_ms).filter((v) => v != null);
  const items = [
    ["shards led", shards.led + "/" + shards.shards],
    ["published (1 min)", perS.toFixed(1) + "/s"],
    ["worst p99 (1 min)", p99.length ? Math.round(Math.max(...p99)) + " ms" : "—"],
  ];
  for (const [label, value] of items) {
    const span = document.createElement("span");
    span.textContent = label + " ";
    const b = document.createElement("b");
    b.textContent = value;
    span.appendChild(b);
    box.appendChild(span);
  }
}

async function refresh() {
  try {
    const [shards, throughput, dead, jobs] = await Promise.all([
      getJson("/v1/ops/shards"),
      getJson("/v1/ops/throughput?minutes=" + MINUTES),
      getJson("/v1/ops/dead?limit=20"),
      getJson(jobsPath()),
    ]);
    const now = Date.now();
    renderShards(shards, now);
    drawChart($("throughput"), throughput.buckets, THROUGHPUT, "");
    legend("throughput-legend", THROUGHPUT, throughput.buckets);
    drawChart($("lag"), throughput.buckets, LAG, "ms");
    legend("lag-legend", LAG, throughput.buckets);
    renderDead(dead);
    renderJobs(jobs);
    renderSummary(shards, throughput);
    await refreshView();
    $("updated").textContent = "updated " + new Date(now).toISOString() +
      " · refreshes every " + REFRESH_MS / 1000 + " s";
    $("error").textContent = "";
    document.body.dataset.state = "ready";
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (err) {
    if (err instanceof Refused) { lock(err.message); return; }
    $("error").textContent = "Could not refresh: " + err.message;
    document.body.dataset.state = "error";
  }
}

function lock(message) {
  if (timer) { clearInterval(timer); timer = null; }
  csrfToken = null;
  sessionStorage.removeItem(KEY_ITEM);
  $("status").hidden = true;
  $("login").hidden = false;
  $("forget").hidden = true;
  $("summary").replaceChildren();
  $("login-error").textContent = message || "";
  document.body.dataset.state = "locked";
}

function unlock() {
  $("login").hidden = true;
  $("status").hidden = false;
  $("forget").hidden = false;
  $("login-error").textContent = "";
  document.body.dataset.state = "loading";
  refresh();
  timer = setInterval(refresh, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const el of document.querySelectorAll(".minutes")) el.textContent = String(MINUTES);
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("key").value.trim();
    $("key").value = "";
    if (!key) { $("login-error").textContent = "Enter an operator key."; return; }
    sessionStorage.setItem(KEY_ITEM, key);
    unlock();
  });
  $("forget").addEventListener("click", () => lock(""));
  wireJobs();
  if (sessionStorage.getItem(KEY_ITEM)) unlock(); else lock("");
});
