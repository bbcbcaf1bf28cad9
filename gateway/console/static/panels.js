// panels.js: the sessions and dead-letters panels. Like the rest of the
// page they use only the gateway's public API: the sessions table follows
// the tenant's two live streams (dialect R /stream, dialect D /aep/events),
// the dead letters come from GET /aep/dead-letters. Text from events is only
// put into the page with textContent.

const MAX_SESSIONS = 200;   // sessions kept, the least recently active dropped
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

// Sessions keeps, per (dialect, session), the latest event seen and how many.
// R events carry their (epoch, seq); D events have no position in the
// session, so D rows show "-" there.
class Sessions {
  constructor(table, status) {
    this.table = table;
    this.status = status;
    this.byKey = new Map(); // insertion order = least recently active first
    this.notes = { r: "connecting…", d: "connecting…" };
    this.dirty = false;
  }
  observe(dialect, m) {
    const ev = m.event;
    if (!ev) return;
    const session = dialect === "r" ? ev.session : ev.session_id;
    if (typeof session !== "string" || session === "") return;
    const key = dialect + "\u0000" + session;
    const prev = this.byKey.get(key);
    this.byKey.delete(key);
    this.byKey.set(key, {
      dialect, session, count: (prev ? prev.count : 0) + 1, type: m.type,
      who: (dialect === "r" ? ev.agent : ev.source) || "-",
      position: dialect === "r" && typeof ev.seq === "number" ? `${ev.epoch || 0}:${ev.seq}` : "-",
      time: ev.time || ev.created_at || "",
    });
    if (this.byKey.size > MAX_SESSIONS) this.byKey.delete(this.byKey.keys().next().value);
    this.dirty = true;
  }
  note(dialect, text) {
    this.notes[dialect] = text;
    this.dirty = true;
  }
  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const rows = [...this.byKey.values()].reverse().map((s) => row([
      [s.session], [s.dialect.toUpperCase()], [s.who], [s.type],
      [s.position, "num position"], [s.time ? new Date(s.time).toISOString().slice(11, 23) : "-"], [String(s.count), "num"],
    ], { session: s.session, dialect: s.dialect }));
    this.table.tBodies[0].replaceChildren(...rows);
    this.status.textContent = `${this.byKey.size} sessions; R stream ${this.notes.r}, D stream ${this.notes.d}`;
  }
}

// follow keeps one live stream of a dialect open for the sessions table,
// reopening it from where it was (so nothing is missed) with backoff.
async function follow(tail, Resume, token, dialect, sessions) {
  const resume = new Resume();
  let wait = RECONNECT_MIN_MS;
  for (;;) {
    try {
      const onOpen = () => { wait = RECONNECT_MIN_MS; sessions.note(dialect, "live"); };
      for await (const m of tail({ token, dialect, filter: "", resume, onOpen })) sessions.observe(dialect, m);
      sessions.note(dialect, "ended; reconnecting");
    } catch (e) {
      sessions.note(dialect, "error: " + e.message + "; reconnecting");
    }
    await sleep(wait);
    wait = Math.min(2 * wait, RECONNECT_MAX_MS);
  }
}

export function startSessions({ tail, Resume, token, table, status }) {
  const sessions = new Sessions(table, status);
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
