package console_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// sessionsScript runs panels.js's sessions table under Node with a
// stand-in DOM and a stand-in tail that yields, on the D stream, one event
// of each of 205 sessions, then a second event of session 3; then, on the
// R stream, two events of session r1. It prints the table's rows and
// status.
const sessionsScript = `
const [panelsJS] = process.argv.slice(1);
class El {
  constructor() { Object.assign(this, { children: [], textContent: "", className: "", dataset: {} }); }
  append(...cs) { this.children.push(...cs); }
  replaceChildren(...cs) { this.children = cs; }
  text() { return this.children.map((c) => c.textContent).join("|"); }
}
globalThis.document = { createElement: () => new El() };
const table = new El();
table.tBodies = [new El()];
const status = new El();
class Resume { observe() {} }
let dDone;
const afterD = new Promise((r) => { dDone = r; });
async function* tail({ dialect, onOpen }) {
  onOpen();
  if (dialect === "d") {
    for (let i = 0; i < 205; i++) yield { type: "task.progress", event: { session_id: "s" + i, source: "agent:a", created_at: "2026-07-09T10:00:00Z" } };
    yield { type: "task.completed", event: { session_id: "s3", source: "agent:b", created_at: "2026-07-09T10:00:01Z" } };
    yield { type: "task.progress", event: { source: "agent:c" } }; // no session: not listed
    dDone();
  } else {
    await afterD; // the R events come last
    yield { type: "run.started", event: { session: "r1", agent: "claude", epoch: 2, seq: 7, time: "2026-07-09T10:00:02Z" } };
    yield { type: "tool.requested", event: { session: "r1", agent: "claude", seq: 8, time: "2026-07-09T10:00:03Z" } };
  }
  await new Promise(() => {}); // then stays open
}
const { startSessions } = await import(panelsJS);
startSessions({ tail, Resume, token: "", table, status });
const ready = () => table.tBodies[0].children.length === 200 && status.textContent.includes("D stream live") &&
  table.tBodies[0].children.some((r) => r.text().split("|")[6] === "2" && r.dataset.session === "r1");
for (let i = 0; i < 200 && !ready(); i++) await new Promise((r) => setTimeout(r, 20));
const rows = table.tBodies[0].children;
console.log("status " + status.textContent);
console.log("count " + rows.length);
console.log("first " + rows[0].text());
console.log("second " + rows[1].text());
console.log("third " + rows[2].text());
console.log("last " + rows[rows.length - 1].text());
console.log("has " + ["s0", "s4", "s5", "s6", "s7"].filter((s) => rows.some((r) => r.dataset.session === s)).join(","));
process.exit(0);
`

// The sessions table keeps the 200 most recently active sessions (the
// least recently active dropped), newest first, one row per (dialect,
// session) with its latest event and count; R rows show epoch:seq (an
// absent epoch is 0), D rows "-"; events without a session are not listed.
func TestSessionsPanel(t *testing.T) {
	script, err := filepath.Abs("static/panels.js")
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, sessionsScript, "file://"+script)
	got := map[string]string{}
	for _, k := range []string{"status", "count", "first", "second", "third", "last", "has"} {
		l := n.next()
		if !strings.HasPrefix(l, k+" ") {
			t.Fatalf("got %q, want %s ...", l, k)
		}
		got[k] = strings.TrimPrefix(l, k+" ")
	}
	for k, want := range map[string]string{
		"status": "200 sessions; R stream live, D stream live",
		"count":  "200",
		// s0..s4 went when s200..s204 came, s5 when s3 came again (it
		// had gone: its count starts again), s6 when r1 came
		"has": "s7",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	rows := fmt.Sprint(got["first"], "\n", got["second"], "\n", got["third"], "\n", got["last"])
	if want := "r1|R|claude|tool.requested|0:8|10:00:03.000|2|1|1|0|0|-\ns3|D|agent:b|task.completed|-|10:00:01.000|1|0|0|0|0|completed\n" +
		"s204|D|agent:a|task.progress|-|10:00:00.000|1|0|0|0|0|progress\ns7|D|agent:a|task.progress|-|10:00:00.000|1|0|0|0|0|progress"; rows != want {
		t.Errorf("first, second, third and last rows:\n%s\nwant:\n%s", rows, want)
	}
}

// resumeScript runs panels.js's fleet view under Node with stream.js's
// Resume and a stand-in tail: the D stream's first request yields three
// events of a task and is lost; the second, which must resume from the
// last cursor rather than ask for since= again, yields the last two again
// (as a replay may) and a fourth. It prints each request's since and
// from_cursor, then the session's row and timeline.
const resumeScript = `
const [panelsJS, streamJS] = process.argv.slice(1);
class El {
  constructor() { Object.assign(this, { children: [], textContent: "", className: "", dataset: {} }); }
  append(...cs) { this.children.push(...cs); }
  replaceChildren(...cs) { this.children = cs; }
  text() { return this.children.map((c) => c.textContent).join("|"); }
}
globalThis.document = { createElement: () => new El() };
const table = new El();
table.tBodies = [new El()];
const { Resume } = await import(streamJS);
const ev = (n, state) => ({ id: "c" + n, type: "task." + state, event: { id: "evt_" + n, type: "task." + state, session_id: "sess_r", source: "tool:t", task_id: "task_r", created_at: "2026-07-09T10:00:0" + n + "Z", payload: {} } });
const requests = [];
async function* tail({ dialect, resume, since, onOpen }) {
  if (dialect === "r") { onOpen(); await new Promise(() => {}); }
  requests.push("since=" + since + " from_cursor=" + resume.cursor);
  onOpen();
  const batch = requests.length === 1 ? [ev(1, "submitted"), ev(2, "accepted"), ev(3, "started")] : [ev(2, "accepted"), ev(3, "started"), ev(4, "completed")];
  for (const m of batch) { resume.observe("d", m, m.event); yield m; }
  if (requests.length === 1) throw new Error("connection reset");
  await new Promise(() => {});
}
const { startSessions } = await import(panelsJS);
const sessions = startSessions({ tail, Resume, token: "", table, status: new El() });
for (let i = 0; i < 300 && !(table.tBodies[0].children[0] || new El()).text().includes("completed"); i++) await new Promise((r) => setTimeout(r, 20));
console.log("requests " + requests.join(" / "));
console.log("row " + (table.tBodies[0].children[0] || new El()).text());
const s = sessions.fleet.get("d\u0000sess_r");
console.log("timeline " + sessions.fleet.timeline(s).map((it) => it.kind + " " + it.name + " " + it.states.join(",")).join(" / "));
process.exit(0);
`

// A stream lost and resumed (the panel's reconnect from its last cursor)
// with events delivered twice does not duplicate them: the session counts
// four events and its task four states.
func TestSessionsResumeNoDuplicates(t *testing.T) {
	panels, err := filepath.Abs("static/panels.js")
	if err != nil {
		t.Fatal(err)
	}
	stream, _ := filepath.Abs("static/stream.js")
	n := startNode(t, resumeScript, "file://"+panels, "file://"+stream)
	for _, want := range []string{
		"requests since=15m from_cursor= / since= from_cursor=c3",
		"row sess_r|D|tool:t|task.completed|-|10:00:04.000|4|0|0|0|0|completed",
		"timeline task task_r submitted,accepted,started,completed",
	} {
		if l := n.next(); l != want {
			t.Errorf("got  %q\nwant %q", l, want)
		}
	}
}
