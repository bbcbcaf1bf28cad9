// console.js: the page. Everything it shows comes from the gateway's public
// API: the SSE streams (read with fetch, see stream.js), GET
// /aep/subscriptions[/{id}], /aep/dead-letters (panels.js) and /readyz; the
// fleet view (fleet.js, fleetview.js) is drawn from the two streams. Text from events is only ever put
// into the page with textContent.

// The page was opened with ?access_token=KEY when the gateway needs a key;
// stream.js comes with the same query (the console may sit behind auth).
const query = new URL(import.meta.url).search;
const { tail, Resume, getJSON, sendJSON } = await import("./stream.js" + query);
const { startSessions, refreshDeadLetters } = await import("./panels.js" + query);
const { FleetView } = await import("./fleetview.js" + query);
const token = new URLSearchParams(location.search).get("access_token") || "";

const MAX_ROWS = 500;        // events kept on the page
const MAX_SUBS = 50;         // subscriptions whose state is fetched
const SUBS_EVERY_MS = 3000;
const HEALTH_EVERY_MS = 5000;
const DEAD_LETTERS_EVERY_MS = 5000;

const $ = (id) => document.getElementById(id);

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.append(td);
}

function setStatus(el, text, error) {
  el.textContent = text;
  el.classList.toggle("error", !!error);
}

// --- live tail -------------------------------------------------------------

let run = null; // {ctrl, resume, dialect, filter, count}

// matches reports whether a tail row is shown under the search text.
function matches(tr, q) {
  return q === "" || tr.dataset.search.includes(q);
}

function applySearch() {
  const q = $("search").value.trim().toLowerCase();
  for (const tr of $("events").tBodies[0].rows) tr.hidden = !matches(tr, q);
}

function addRow(m) {
  const ev = m.event || {};
  const tr = document.createElement("tr");
  tr.dataset.type = m.type;
  tr.dataset.search = (m.raw || "").toLowerCase();
  tr.hidden = !matches(tr, $("search").value.trim().toLowerCase());
  const t = ev.created_at || ev.time || "";
  cell(tr, t ? new Date(t).toISOString().slice(11, 23) : "-");
  cell(tr, m.type);
  cell(tr, ev.source || "-");
  let session = ev.session_id || ev.session || "-";
  if (typeof ev.seq === "number") session += `:${ev.epoch || 0}:${ev.seq}`;
  cell(tr, session);
  const body = ev.payload !== undefined ? ev.payload : ev.data;
  cell(tr, body === undefined ? m.raw : JSON.stringify(body), "payload");
  const tbody = $("events").tBodies[0];
  tbody.prepend(tr);
  while (tbody.rows.length > MAX_ROWS) tbody.lastElementChild.remove();
}

async function stream(r) {
  const status = $("tail-status");
  try {
    setStatus(status, "connecting…");
    for await (const m of tail({ token, dialect: r.dialect, filter: r.filter, resume: r.resume, signal: r.ctrl.signal,
      onOpen: () => setStatus(status, `live (${r.count} events so far)`) })) {
      r.count++;
      addRow(m);
      setStatus(status, `live: ${r.count} events`);
    }
    setStatus(status, "the gateway ended the stream; press Start", true);
  } catch (e) {
    if (r.ctrl.signal.aborted) return; // paused or restarted
    setStatus(status, "stream error: " + e.message, true);
  }
  $("pause").disabled = true;
}

function start(ev) {
  ev.preventDefault();
  if (run) run.ctrl.abort();
  run = { ctrl: new AbortController(), resume: new Resume(), dialect: $("dialect").value, filter: $("filter").value, count: 0 };
  $("pause").disabled = false;
  $("pause").textContent = "Pause";
  stream(run);
}

function pauseResume() {
  if (!run) return;
  const btn = $("pause");
  if (btn.textContent === "Pause") {
    run.ctrl.abort();
    btn.textContent = "Resume";
    setStatus($("tail-status"), `paused after ${run.count} events`);
    return;
  }
  run.ctrl = new AbortController();
  btn.textContent = "Pause";
  stream(run); // from run.resume: what arrived meanwhile is replayed
}

$("tail-form").addEventListener("submit", start);
$("pause").addEventListener("click", pauseResume);
$("clear").addEventListener("click", () => $("events").tBodies[0].replaceChildren());
$("search").addEventListener("input", applySearch);
$("dialect").addEventListener("change", () => {
  $("filter").placeholder = $("dialect").value === "d" ? "types=*&session_id=sess_01" : '{"session":"s_8f2c"}';
});

// --- subscriptions -----------------------------------------------------------

async function refreshSubs() {
  const status = $("subs-status");
  try {
    const list = await getJSON("", token, "/aep/subscriptions");
    const subs = (list.subscriptions || []).slice(0, MAX_SUBS);
    const states = await Promise.all(subs.map((s) =>
      getJSON("", token, "/aep/subscriptions/" + encodeURIComponent(s.subscription_id)).catch((e) => ({ ...s, error: e.message }))));
    const rows = states.map((s) => {
      const tr = document.createElement("tr");
      tr.dataset.id = s.subscription_id;
      cell(tr, s.subscription_id);
      cell(tr, JSON.stringify(s.filter));
      cell(tr, s.error ? s.error : String(s.lag ?? "?"), "num lag");
      cell(tr, s.streaming ? "yes" : "no");
      for (const k of ["pending_acks", "redeliveries", "dead_lettered", "acked"]) cell(tr, s.streaming ? String(s[k] ?? 0) : "-", "num");
      const td = document.createElement("td");
      const del = document.createElement("button");
      del.type = "button";
      del.className = "delete";
      del.textContent = armed === s.subscription_id ? "Confirm delete" : "Delete";
      del.addEventListener("click", () => deleteSub(s.subscription_id, del));
      td.append(del);
      tr.append(td);
      return tr;
    });
    $("subscriptions").tBodies[0].replaceChildren(...rows);
    const more = (list.subscriptions || []).length > MAX_SUBS ? ` (first ${MAX_SUBS} shown)` : "";
    subsStatus(status, `${(list.subscriptions || []).length} subscriptions${more}, updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    subsStatus(status, "subscriptions: " + e.message, true);
  }
}

// actionShown is when a create or delete last put its outcome in the
// status line. A refresh, periodic or not, leaves that outcome there for
// ACTION_HOLD_MS: otherwise a refresh that was in flight when the user
// clicked (every 3 s) could replace "create: HTTP 400 ..." at once.
let actionShown = 0;
const ACTION_HOLD_MS = 5000;

function subsStatus(el, text, error) {
  if (Date.now() - actionShown < ACTION_HOLD_MS) return;
  setStatus(el, text, error);
}

function actionStatus(text, error) {
  actionShown = Date.now();
  setStatus($("subs-status"), text, error);
}

// armed is the subscription whose Delete was clicked once (kept across the
// table's refreshes); a second click deletes it.
let armed = "";

async function deleteSub(id, btn) {
  if (armed !== id) {
    armed = id;
    btn.textContent = "Confirm delete";
    return;
  }
  btn.disabled = true;
  try {
    await sendJSON("", token, "DELETE", "/aep/subscriptions/" + encodeURIComponent(id));
    actionStatus(`deleted ${id}`);
  } catch (e) {
    actionStatus(`delete ${id}: ${e.message}`, true);
  }
  armed = "";
  refreshSubs();
}

// createSub posts the form's body; the gateway's refusal is shown as is.
async function createSub(ev) {
  ev.preventDefault();
  let body;
  try {
    body = JSON.parse($("sub-body").value);
  } catch (e) {
    actionStatus("not JSON: " + e.message, true);
    return;
  }
  try {
    const out = await sendJSON("", token, "POST", "/aep/subscriptions", body);
    await refreshSubs();
    actionStatus(`created ${out.subscription_id}`);
  } catch (e) {
    actionStatus("create: " + e.message, true);
  }
}

// --- node health -------------------------------------------------------------

async function refreshHealth() {
  const badge = $("health");
  try {
    const resp = await fetch("/readyz");
    badge.textContent = resp.ok ? "node ready" : `node not ready (HTTP ${resp.status})`;
    badge.className = "badge " + (resp.ok ? "ok" : "bad");
  } catch (e) {
    badge.textContent = "node unreachable";
    badge.className = "badge bad";
  }
}

// --- sessions and dead letters (panels.js) -------------------------------------

const view = new FleetView({ summaryEl: $("fleet-summary"), agents: $("agents"), rates: $("rates"), title: $("timeline-title"), timeline: $("timeline") });
startSessions({ tail, Resume, token, table: $("sessions"), status: $("sessions-status"), view });
const deadLetters = () => refreshDeadLetters({ getJSON, token, table: $("dead-letters"), status: $("dl-status") });

$("subs-refresh").addEventListener("click", refreshSubs);
$("sub-form").addEventListener("submit", createSub);
$("dl-refresh").addEventListener("click", deadLetters);
refreshSubs();
refreshHealth();
deadLetters();
setInterval(refreshSubs, SUBS_EVERY_MS);
setInterval(refreshHealth, HEALTH_EVERY_MS);
setInterval(deadLetters, DEAD_LETTERS_EVERY_MS);
