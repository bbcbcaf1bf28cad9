// panels.js: the sessions and dead-letters panels. Like the rest of the
// page they use only the gateway's public API: the sessions table follows
// the tenant's two streams (dialect R /stream, dialect D /aep/events, each
// first read from the last 15 minutes with since=, then live),
// the dead letters come from GET /aep/dead-letters. Text from events is only
// put into the page with textContent.

const { Fleet, summary } = await import("./fleet.js" + new URL(import.meta.url).search);

const RECENT = "15m";       // the look-back of the first request of each stream (since=)
const RENDER_EVERY_MS = 250;
const RECONNECT_MIN_MS = 1000;
const RECONNECT_MAX_MS = 30000;
const DEAD_LETTERS = 20;    // newest dead letters shown

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function row(cells, dataset) {
  const tr = document.createElement("tr");
  Object.assign(tr.dataset, dataset);
  for (const [text, cls] of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.append(td);
  }
  return tr;
}

// --- sessions ------------------------------------------------------------------

// Sessions is the fleet view: the Fleet model (fleet.js) fed by the two
// streams, its sessions table and, through fleetview.js, the agents, the
// rate charts and the timeline of the session clicked.
class Sessions {
  constructor(table, status, view) {
    this.table = table;
    this.status = status;
    this.view = view;
    this.fleet = new Fleet();
    this.notes = { r: "connecting…", d: "connecting…" };
    this.drawn = -1;
    this.selected = "";
  }
  observe(dialect, m) { this.fleet.observe(dialect, m); }
  note(dialect, text) {
    this.notes[dialect] = text;
    this.drawn = -1;
  }
  select(key) {
    this.selected = key;
    this.drawn = -1;
    this.render();
  }
  render() {
    if (this.view) this.view.tick(this.fleet, this.selected);
    if (this.drawn === this.fleet.version) return;
    this.drawn = this.fleet.version;
    const rows = this.fleet.sessions().map((s) => {
      const n = summary(this.fleet.timeline(s));
      const tr = row([
        [s.session], [s.dialect.toUpperCase()], [s.who], [s.type],
        [s.position, "num position"], [s.time ? new Date(s.time).toISOString().slice(11, 23) : "-"], [String(s.count), "num"],
        [String(n.runs), "num runs"], [n.toolsFailed ? `${n.tools} (${n.toolsFailed} failed)` : String(n.tools), "num tools"],
        [String(n.waiting), "num waiting"], [String(n.errors), "num errors"], [n.taskStates.join(", ") || "-", "tasks"],
      ], { session: s.session, dialect: s.dialect, key: s.key });
      tr.className = (s.key === this.selected ? "selected " : "") + (n.waiting ? "attn " : "") + (n.errors ? "err" : "");
      if (tr.addEventListener) tr.addEventListener("click", () => this.select(s.key));
      return tr;
    });
    this.table.tBodies[0].replaceChildren(...rows);
    this.status.textContent = `${this.fleet.byKey.size} sessions; R stream ${this.notes.r}, D stream ${this.notes.d}`;
  }
}

// follow keeps one stream of a dialect open for the fleet view. The first
// request (and any before an event gave a position) asks for the last
// RECENT of the log (since=), so sessions active before the page opened
// show; a lost stream is reopened from where it was (so nothing is
// missed) with backoff; an event seen twice is kept once (fleet.js).
async function follow(tail, Resume, token, dialect, sessions) {
  const resume = new Resume();
  let wait = RECONNECT_MIN_MS;
  for (;;) {
    try {
      const onOpen = () => { wait = RECONNECT_MIN_MS; sessions.note(dialect, "live"); };
      const since = resume.cursor || (resume.positions && resume.positions.length > 0) ? "" : RECENT;
      for await (const m of tail({ token, dialect, filter: "", resume, since, onOpen })) sessions.observe(dialect, m);
      sessions.note(dialect, "ended; reconnecting");
    } catch (e) {
      sessions.note(dialect, "error: " + e.message + "; reconnecting");
    }
    await sleep(wait);
    wait = Math.min(2 * wait, RECONNECT_MAX_MS);
  }
}

export function startSessions({ tail, Resume, token, table, status, view }) {
  const sessions = new Sessions(table, status, view);
  follow(tail, Resume, token, "r", sessions);
  follow(tail, Resume, token, "d", sessions);
  setInterval(() => sessions.render(), RENDER_EVERY_MS);
  return sessions;
}

// --- dead letters ----------------------------------------------------------------

// refreshDeadLetters shows the newest dead letters of the tenant: when, of
// which subscription, the original event, the attempts and the last error.
export async function refreshDeadLetters({ getJSON, token, table, status }) {
  try {
    const out = await getJSON("", token, "/aep/dead-letters?limit=" + DEAD_LETTERS);
    const rows = (out.dead_letters || []).map((d) => {
      const p = (d.event && d.event.payload) || {};
      const orig = p.original_event || {};
      const err = p.last_error || {};
      return row([
        [d.time ? new Date(d.time).toISOString().slice(0, 23).replace("T", " ") : "-"], [p.subscription_id || "-"],
        [p.original_event_id || "-"], [orig.type || "-"], [String(p.attempts ?? "-"), "num"],
        [err.code ? `${err.code}: ${err.message || ""}` : "-", "payload"],
      ], { id: p.original_event_id || "" });
    });
    table.tBodies[0].replaceChildren(...rows);
    status.classList.toggle("error", false);
    status.textContent = `${rows.length === DEAD_LETTERS ? "the newest " : ""}${rows.length} dead letter${rows.length === 1 ? "" : "s"}, updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    status.classList.toggle("error", true);
    status.textContent = "dead letters: " + e.message;
  }
}
