// stream.js: the console's client of the gateway's public streaming API,
// with no dependency on the page (the tests run it under Node).
//
// EventSource cannot be used for a wildcard tail: every message of both
// dialects is named (`event: <type>`), so onmessage never fires, and it
// cannot send an Authorization header. fetch() can do both: it reads the
// text/event-stream body and parses it here.

const MAX_LINE = 16 << 20; // longest SSE line accepted (an event is at most a few MiB)
const MAX_POSITIONS = 64;  // R positions kept for a resume (the gateway's default limit)

// sseMessages parses a text/event-stream body (a ReadableStream of bytes)
// into {event, id, data} messages; comments are skipped.
export async function* sseMessages(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let msg = { event: "", id: "", data: [] };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          if (msg.data.length > 0) yield { event: msg.event, id: msg.id, data: msg.data.join("\n") };
          msg = { event: "", id: "", data: [] };
          continue;
        }
        if (line[0] === ":") continue;
        const c = line.indexOf(":");
        const field = c < 0 ? line : line.slice(0, c);
        const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
        if (field === "event") msg.event = val;
        else if (field === "id") msg.id = val;
        else if (field === "data") msg.data.push(val);
      }
      if (buf.length > MAX_LINE) throw new Error("SSE line too long");
    }
  } finally {
    reader.releaseLock();
  }
}

// streamPath builds the stream request of a dialect: D takes the query form
// of its filter ("types=task.*&session_id=s1"), R an attr-match JSON object.
// since (a duration, "15m") starts at the events the log got in that last
// stretch, when there is no resume point.
export function streamPath(dialect, filter, resume, since) {
  const q = new URLSearchParams();
  if (dialect === "d") {
    new URLSearchParams(filter || "types=*").forEach((v, k) => q.append(k, v));
    if (resume && resume.cursor) {
      q.set("delivery_mode", "replayable");
      q.set("from_cursor", resume.cursor);
    } else if (since) q.set("since", since);
    return "/aep/events?" + q.toString();
  }
  const f = (filter || "").trim();
  if (f !== "") {
    JSON.parse(f); // a clear error before the request
    q.set("filter", f);
  }
  if (resume && resume.positions && resume.positions.length > 0) q.set("from", JSON.stringify(resume.positions));
  else if (since) q.set("since", since);
  return "/stream?" + q.toString();
}

// Resume remembers where a stream can continue: D's last cursor, R's last
// position per session (the most recently updated MAX_POSITIONS).
export class Resume {
  constructor() {
    this.cursor = "";
    this.bySession = new Map();
  }
  observe(dialect, msg, ev) {
    if (dialect === "d") {
      if (msg.id) this.cursor = msg.id;
      return;
    }
    if (!ev || typeof ev.session !== "string" || typeof ev.seq !== "number") return;
    this.bySession.delete(ev.session);
    this.bySession.set(ev.session, { session: ev.session, epoch: ev.epoch || 0, seq: ev.seq });
    if (this.bySession.size > MAX_POSITIONS) this.bySession.delete(this.bySession.keys().next().value);
  }
  get positions() {
    return [...this.bySession.values()];
  }
}

// apiError reads a refusal of either dialect into an Error.
export async function apiError(resp) {
  let text = await resp.text();
  try {
    const b = JSON.parse(text);
    if (b.error && typeof b.error === "object") text = `${b.error.code}: ${b.error.message}`;
    else if (b.error) text = `${b.error}: ${b.detail || ""}`;
  } catch (_) { /* not JSON: keep the text */ }
  return new Error(`HTTP ${resp.status} ${text}`.trim());
}

// tail opens a stream and yields {type, id, event, raw} for every message
// until signal aborts it (or the gateway ends it). onOpen is called once the
// gateway answered 200 (the subscription exists then).
export async function* tail({ base = "", token = "", dialect = "d", filter = "", resume = null, since = "", signal, onOpen }) {
  const headers = { Accept: "text/event-stream" };
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(base + streamPath(dialect, filter, resume, since), { headers, signal });
  if (!resp.ok) throw await apiError(resp);
  if (onOpen) onOpen();
  for await (const m of sseMessages(resp.body)) {
    let ev = null;
    try { ev = JSON.parse(m.data); } catch (_) { /* shown raw */ }
    if (resume) resume.observe(dialect, m, ev);
    yield { type: m.event || (ev && ev.type) || "message", id: m.id, event: ev, raw: m.data };
  }
}

// sendJSON sends body (an object, or nothing) to an API path with method
// and the token; it returns the answer's JSON, or null for 204.
export async function sendJSON(base, token, method, path, body) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!resp.ok) throw await apiError(resp);
  return resp.status === 204 ? null : resp.json();
}

// getJSON GETs an API path with the token.
export async function getJSON(base, token, path, signal) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(base + path, { headers, signal });
  if (!resp.ok) throw await apiError(resp);
  return resp.json();
}
