// fleet.js: the console's model of the fleet, with no dependency on the
// page (the tests run it under Node). It keeps, per session of either
// dialect, a compact copy of its latest events, derives the session's
// timeline from them (runs, steps, tool calls with their durations,
// attention requests and whether they still wait, errors, dialect D tasks
// with their states), and counts event rates per type. Everything it holds
// is bounded by LIMITS.

export const LIMITS = {
  sessions: 200,        // sessions kept, the least recently active dropped
  eventsPerSession: 300, // latest events of a session its timeline is derived from
  text: 200,            // characters kept of any string of an event
  rateTypes: 50,        // event types counted apart; the others count as "other"
  buckets: 60,          // points of a rate chart
  bucketMs: 5000,       // one point: 5 s (a chart: the last 5 minutes)
};

export const ACTIVE_MS = 60000; // a session with an event (by its own time) in the last minute is active

const str = (v) => (typeof v === "string" ? v.slice(0, LIMITS.text) : "");
const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
const obj = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : {});

// compact keeps of an event what the timeline and the tables read.
export function compact(dialect, type, ev, arrived) {
  const body = obj(dialect === "r" ? ev.data : ev.payload);
  const tool = obj(body.tool);
  const err = obj(body.error);
  const t = Date.parse(dialect === "r" ? ev.time : ev.created_at);
  return {
    id: str(ev.id), type: str(type), time: Number.isNaN(t) ? arrived : t, arrived,
    subject: str(ev.subject), run: str(ev.run), step: str(ev.step), cause: str(dialect === "r" ? ev.cause : ev.causation_id),
    who: str(dialect === "r" ? ev.agent : ev.source), severity: str(ev.severity),
    call: str(tool.call_id), tool: str(tool.name), name: str(body.name), status: str(body.status),
    duration: num(body.duration_ms) ?? num(body.latency_ms),
    error: str(err.message) || str(err.type) || str(body.reason) || (typeof body.error === "string" ? str(body.error) : ""),
    code: str(body.code), kind: str(body.kind), prompt: str(body.prompt), fatal: body.fatal === true,
    task: str(ev.task_id) || str(body.task_id), state: str(body.state), message: str(body.message),
    position: dialect === "r" && typeof ev.seq === "number" ? `${num(ev.epoch) ?? 0}:${ev.seq}` : "-",
  };
}

// Fleet keeps the sessions of both dialects, most recently active last.
export class Fleet {
  constructor(now = () => Date.now()) {
    this.now = now;
    this.byKey = new Map(); // insertion order = least recently active first
    this.rates = new Rates(now);
    this.version = 0; // bumped by every change
  }

  // observe takes one message of a dialect's stream ({type, event});
  // it returns false for an event it already holds (a replay after a
  // reconnect) or one without a session.
  observe(dialect, m) {
    const ev = m.event;
    if (!ev || typeof ev !== "object" || m.type === "event.replayed") return false; // the gateway's marker
    const session = dialect === "r" ? ev.session : ev.session_id;
    const c = compact(dialect, m.type, ev, this.now());
    if (typeof session !== "string" || session === "") {
      this.rates.add(c.type, c.time); // an agent's event: counted, in no session
      this.version++;
      return false;
    }
    const key = dialect + "\u0000" + session;
    let s = this.byKey.get(key);
    if (s && c.id !== "" && s.ids.has(c.id)) return false;
    this.byKey.delete(key);
    if (!s) s = { key, dialect, session, count: 0, events: [], ids: new Set(), derived: null };
    this.byKey.set(key, s);
    s.count++;
    s.who = c.who || "-";
    s.type = c.type;
    s.position = c.position;
    s.time = c.time;
    // when it last did something: the event's own time, unless the
    // producer's clock is ahead of the page's
    s.seen = Math.min(c.time, c.arrived);
    s.events.push(c);
    if (c.id !== "") s.ids.add(c.id);
    if (s.events.length > LIMITS.eventsPerSession) s.ids.delete(s.events.shift().id);
    s.derived = null;
    if (this.byKey.size > LIMITS.sessions) this.byKey.delete(this.byKey.keys().next().value);
    this.rates.add(c.type, c.time);
    this.version++;
    return true;
  }

  get(key) { return this.byKey.get(key); }

  // sessions lists them most recently active first.
  sessions() { return [...this.byKey.values()].reverse(); }

  // timeline returns the session's derived timeline (cached until its next event).
  timeline(s) {
    if (!s.derived) s.derived = deriveTimeline(s.events);
    return s.derived;
  }

  // agents groups the sessions by agent (R) or source (D).
  agents() {
    const now = this.now();
    const by = new Map();
    for (const s of this.byKey.values()) {
      const k = s.dialect + "\u0000" + s.who;
      const a = by.get(k) || { who: s.who, dialect: s.dialect, sessions: 0, active: 0, events: 0, last: 0 };
      a.sessions++;
      a.events += s.count;
      if (now - s.seen < ACTIVE_MS) a.active++;
      a.last = Math.max(a.last, s.time);
      by.set(k, a);
    }
    return [...by.values()].sort((a, b) => b.last - a.last);
  }
}

// --- timeline ------------------------------------------------------------------

// Items of a timeline: {kind, key, name, status, start, end, duration,
// detail, states}; kind is run, step, tool, attention, error or task.
// status "failed" (tool, run, task), "waiting" (attention) are the ones a
// reader looks for.
export function deriveTimeline(events) {
  const items = [];
  const open = new Map(); // kind + key -> item
  const item = (kind, key, e, fields) => {
    let it = open.get(kind + "\u0000" + key);
    if (!it) {
      it = { kind, key, name: key, status: "", start: e.time, end: undefined, duration: undefined, detail: "", states: [] };
      open.set(kind + "\u0000" + key, it);
      items.push(it);
    }
    return Object.assign(it, fields);
  };
  const finish = (it, e, status) => {
    it.status = status;
    it.end = e.time;
    it.duration = e.duration ?? (Number.isFinite(it.start) ? Math.max(0, e.time - it.start) : undefined);
  };
  for (const e of events) {
    const [family, ...rest] = e.type.split(".");
    const verb = rest.join(".");
    if (family === "run" && !verb.startsWith("step.")) {
      const it = item("run", e.run || e.id, e, {});
      if (verb === "started") it.status = "running";
      else if (verb === "finished") finish(it, e, e.status || "finished");
      else if (verb === "failed") { finish(it, e, "failed"); it.detail = e.error; }
      else if (verb === "cancelled") finish(it, e, "cancelled");
    } else if (family === "run") {
      const it = item("step", (e.run ? e.run + "/" : "") + (e.step || e.id), e, {});
      if (e.name) it.name = e.name;
      if (verb === "step.started") it.status = "running";
      else finish(it, e, e.status || "finished");
    } else if (family === "tool") {
      const it = item("tool", e.call || e.subject + "\u0000" + e.run + "\u0000" + e.step, e, {});
      it.name = e.tool || e.subject || it.name;
      if (verb === "requested") it.status = "running";
      else if (verb === "completed") finish(it, e, e.status === "error" ? "failed" : "completed");
      else if (verb === "failed") { finish(it, e, "failed"); it.detail = e.error; }
      else if (verb === "denied") { finish(it, e, "denied"); it.detail = e.error; }
    } else if (family === "attention") {
      // attention.requested opens one; the others name it as their subject
      const it = item("attention", verb === "requested" ? e.id : e.subject || e.cause, e, {});
      if (verb === "requested") {
        it.status = "waiting";
        it.name = e.kind || "attention";
        it.detail = e.prompt;
      } else if (verb === "answered" || verb === "resolved") finish(it, e, "answered");
      else if (verb === "timeout") finish(it, e, "timed out");
    } else if (family === "error") {
      item("error", e.id, e, { name: e.code || e.error || e.type, status: e.fatal ? "fatal" : "error", detail: e.error });
    } else if (family === "task") {
      const it = item("task", e.task || "(no task_id)", e, {});
      const state = verb || e.state;
      it.states.push(state);
      it.status = state;
      it.end = e.time;
      it.duration = Number.isFinite(it.start) ? Math.max(0, e.time - it.start) : undefined;
      if (state === "failed") it.detail = e.error || e.message;
      else if (e.message) it.detail = e.message;
    }
  }
  return items;
}

// summary counts what a fleet row shows of a timeline.
export function summary(items) {
  const n = { runs: 0, tools: 0, toolsFailed: 0, waiting: 0, errors: 0, tasks: 0, taskStates: [] };
  for (const it of items) {
    if (it.kind === "run") { n.runs++; if (it.status === "failed") n.errors++; }
    if (it.kind === "tool") { n.tools++; if (it.status === "failed" || it.status === "denied") { n.toolsFailed++; n.errors++; } }
    if (it.kind === "attention" && it.status === "waiting") n.waiting++;
    if (it.kind === "error") n.errors++;
    if (it.kind === "task") { n.tasks++; n.taskStates.push(it.status); if (it.status === "failed") n.errors++; }
  }
  return n;
}

// --- rates -----------------------------------------------------------------------

// Rates counts events per type in LIMITS.buckets buckets of
// LIMITS.bucketMs, by the event's own time when it falls in the window
// (a replayed event counts when it happened), else by its arrival.
export class Rates {
  constructor(now) {
    this.now = now;
    this.byType = new Map(); // type -> Map(bucket index -> count)
    this.total = new Map();
  }
  add(type, time) {
    const now = this.now();
    const t = time >= now - LIMITS.buckets * LIMITS.bucketMs && time <= now + LIMITS.bucketMs ? time : now;
    const b = Math.floor(t / LIMITS.bucketMs);
    let k = type || "?";
    if (!this.byType.has(k) && this.byType.size >= LIMITS.rateTypes) k = "other";
    const m = this.byType.get(k) || new Map();
    m.set(b, (m.get(b) || 0) + 1);
    this.byType.set(k, m);
    this.total.set(b, (this.total.get(b) || 0) + 1);
  }
  // series returns [{name, points, sum}]: the tenant's total, then the
  // types with the most events in the window (at most n), each with
  // LIMITS.buckets counts, oldest first. Buckets past the window are
  // dropped here.
  series(n) {
    const last = Math.floor(this.now() / LIMITS.bucketMs);
    const first = last - LIMITS.buckets + 1;
    const pts = (m) => {
      for (const b of m.keys()) if (b < first) m.delete(b);
      return Array.from({ length: LIMITS.buckets }, (_, i) => m.get(first + i) || 0);
    };
    const out = [];
    for (const [name, m] of this.byType) {
      const points = pts(m);
      const sum = points.reduce((a, b) => a + b, 0);
      if (sum === 0) this.byType.delete(name);
      else out.push({ name, points, sum });
    }
    out.sort((a, b) => b.sum - a.sum || (a.name < b.name ? -1 : 1));
    const total = pts(this.total);
    return [{ name: "tenant (all types)", points: total, sum: total.reduce((a, b) => a + b, 0) }, ...out.slice(0, n)];
  }
}
