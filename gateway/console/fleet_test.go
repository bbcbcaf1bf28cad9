package console_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// fleetScript feeds fleet.js's model, under Node, a dialect R session (a
// run, three tool calls of which one failed, two attention requests of
// which one was answered, an error) and a dialect D task through its
// states; then all of it again (a replay after a reconnect); then 250
// sessions and 350 events of one session. It prints what the model holds
// as one JSON line.
const fleetScript = `
const [fleetJS] = process.argv.slice(1);
const { Fleet, summary, LIMITS } = await import(fleetJS);
const now = Date.parse("2026-07-09T10:02:00Z");
const fleet = new Fleet(() => now);
const at = (s) => "2026-07-09T10:" + s + "Z";
const r = (id, type, time, extra, data) => ({ type, event: { aep: "0.1", id, type, time: at(time), session: "s1", agent: "claude-code", seq: Number(id.slice(1)), ...extra, data } });
const rs = [
  r("e0", "session.started", "00:00.000", {}, {}),
  r("e1", "run.started", "00:01.000", { run: "r1" }, {}),
  r("e2", "tool.requested", "00:02.000", { run: "r1", subject: "Bash" }, { tool: { name: "Bash", call_id: "t1" } }),
  r("e3", "tool.completed", "00:03.240", { run: "r1", subject: "Bash" }, { tool: { name: "Bash", call_id: "t1" }, status: "success", duration_ms: 1240 }),
  r("e4", "tool.requested", "00:04.000", { run: "r1" }, { tool: { name: "Write", call_id: "t2" } }),
  r("e5", "tool.failed", "00:04.310", { run: "r1" }, { tool: { name: "Write", call_id: "t2" }, error: { type: "io_error", message: "ENOSPC" }, duration_ms: 310 }),
  r("e6", "tool.requested", "00:05.000", { run: "r1" }, { tool: { name: "<script>alert(1)</script>", call_id: "t3" } }),
  r("e7", "tool.completed", "00:05.500", { run: "r1" }, { tool: { name: "Read", call_id: "t3" }, status: "success" }),
  r("e8", "attention.requested", "00:06.000", { run: "r1" }, { kind: "permission", prompt: "x".repeat(500) }),
  r("e9", "attention.requested", "00:07.000", { run: "r1" }, { kind: "permission", prompt: "deploy?" }),
  r("e10", "attention.resolved", "00:09.000", { subject: "e9" }, { resolution: "answered", latency_ms: 2000 }),
  r("e11", "error.raised", "00:10.000", { run: "r1" }, { code: "rate_limited", error: { message: "throttled" } }),
  r("e12", "run.finished", "00:11.000", { run: "r1" }, { duration_ms: 10000 }),
  r("e13", "run.step.started", "00:12.000", { run: "r2", step: "1" }, { name: "plan the change" }),
  r("e14", "run.step.finished", "00:12.750", { run: "r2", step: "1" }, { status: "success" }),
];
const d = (n, state, time, payload) => ({ type: "task." + state, event: { aep_version: "0.1", id: "evt_" + n, type: "task." + state, source: "tool:crawler", session_id: "sess_1", task_id: "task_01", created_at: at(time), payload: { task_id: "task_01", state, ...payload } } });
const ds = [d(1, "submitted", "01:00"), d(2, "accepted", "01:01"), d(3, "started", "01:02"), d(4, "progress", "01:03", { message: "12 pages" }), d(5, "completed", "01:10")];
const out = {};
out.first = [...rs.map((m) => fleet.observe("r", m)), ...ds.map((m) => fleet.observe("d", m))].filter(Boolean).length;
fleet.observe("r", { type: "agent.heartbeat", event: { aep: "0.1", id: "hb1", type: "agent.heartbeat", time: at("01:50.000"), agent: "claude-code", data: {} } });
fleet.observe("d", { type: "event.replayed", event: { aep_version: "0.1", id: "evt_r", type: "event.replayed", source: "aep-gateway", created_at: at("01:50"), payload: {} } });
const old = (n) => ({ type: "task.submitted", event: { id: "o" + n, session_id: "sess_old" + n, source: "agent:old", created_at: "2026-07-09T09:00:00Z" } });
fleet.observe("d", old(1));
out.activeOld = fleet.agents().find((a) => a.who === "agent:old").active;
out.again = [...rs.map((m) => fleet.observe("r", m)), ...ds.map((m) => fleet.observe("d", m))].filter(Boolean).length;
const s1 = fleet.get("r\u0000s1"), d1 = fleet.get("d\u0000sess_1");
out.count = [s1.count, d1.count];
out.r = fleet.timeline(s1).map((it) => [it.kind, it.name.slice(0, 30), it.status, it.duration ?? null, (it.detail || "").length > 40 ? "len " + it.detail.length : it.detail || ""]);
out.d = fleet.timeline(d1).map((it) => [it.kind, it.name, it.status, it.states.join(","), it.duration ?? null, it.detail]);
out.sum = summary(fleet.timeline(s1));
out.agents = fleet.agents().map((a) => a.who + ":" + a.sessions + ":" + a.events);
out.rates = fleet.rates.series(3).map((s) => s.name + ":" + s.sum + ":" + s.points.length);
for (let i = 0; i < 250; i++) fleet.observe("d", { type: "task.progress", event: { id: "b" + i, session_id: "bulk" + i, source: "agent:b", created_at: at("01:30") } });
out.sessions = fleet.byKey.size;
out.keptS1 = fleet.get("r\u0000s1") !== undefined;
for (let i = 0; i < 350; i++) fleet.observe("d", { type: "task.progress", event: { id: "long" + i, session_id: "long", source: "agent:l", task_id: "tl", created_at: at("01:40") } });
const long = fleet.get("d\u0000long");
out.long = [long.count, long.events.length, long.ids.size, fleet.timeline(long)[0].states.length];
out.limits = [LIMITS.sessions, LIMITS.eventsPerSession];
console.log(JSON.stringify(out));
process.exit(0);
`

// The fleet model derives a session's timeline from its events: the run
// with its duration, a step with the time between its two events, three tool calls with theirs (1240 ms and 310 ms as the
// events state them, 500 ms from the times of call and result, correlated
// by call_id), the failed one marked failed with its error, the attention
// request without an answer waiting and the answered one answered (the
// answer names the request as its subject), the error; the D task's states
// in order. A replay of the same 20 events (a stream reopened) adds nothing.
// 250 more sessions keep 200, the least recently active dropped; a session
// of 350 events keeps its latest 300 (and their ids, nothing more), with
// its count. Strings are cut at 200 characters. An agent's event (no
// session) counts in the rates; the gateway's event.replayed does not; a
// session whose event is an hour old is not active.
func TestFleetModel(t *testing.T) {
	script, err := filepath.Abs("static/fleet.js")
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, fleetScript, "file://"+script)
	var got struct {
		First, Again int
		Count        []int
		R, D         [][]any
		Sum          map[string]any
		Agents       []string
		Rates        []string
		Sessions     int
		KeptS1       bool
		ActiveOld    int
		Long, Limits []int
	}
	line := n.next()
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if got.First != 20 || got.Again != 0 || got.Count[0] != 15 || got.Count[1] != 5 {
		t.Errorf("first pass kept %d events, the replay %d (want 20, 0); counts %v (want 15, 5)", got.First, got.Again, got.Count)
	}
	wantR := `[["run","r1","finished",10000,""],["tool","Bash","completed",1240,""],["tool","Write","failed",310,"ENOSPC"],` +
		`["tool","Read","completed",500,""],["attention","permission","waiting",null,"len 200"],["attention","permission","answered",2000,"deploy?"],` +
		`["error","rate_limited","error",null,"throttled"],["step","plan the change","success",750,""]]`
	if b, _ := json.Marshal(got.R); string(b) != wantR {
		t.Errorf("R timeline:\n%s\nwant\n%s", b, wantR)
	}
	wantD := `[["task","task_01","completed","submitted,accepted,started,progress,completed",10000,"12 pages"]]`
	if b, _ := json.Marshal(got.D); string(b) != wantD {
		t.Errorf("D timeline:\n%s\nwant\n%s", b, wantD)
	}
	if b, _ := json.Marshal(got.Sum); string(b) != `{"errors":2,"runs":1,"taskStates":[],"tasks":0,"tools":3,"toolsFailed":1,"waiting":1}` {
		t.Errorf("summary %s", b)
	}
	if got.ActiveOld != 0 {
		t.Errorf("a session whose event is an hour old counts as active")
	}
	if strings.Join(got.Agents, ",") != "tool:crawler:1:5,claude-code:1:15,agent:old:1:1" {
		t.Errorf("agents %v", got.Agents)
	}
	// the times are within the 5 minutes before the model's clock: all 20,
	// the agent's heartbeat (in no session), and the hour-old event by
	// its arrival; the gateway's event.replayed is not an event of the tenant
	if strings.Join(got.Rates, ",") != "tenant (all types):22:60,tool.requested:3:60,attention.requested:2:60,task.submitted:2:60" {
		t.Errorf("rates %v", got.Rates)
	}
	if got.Sessions != 200 || got.KeptS1 {
		t.Errorf("after 250 more sessions: %d kept (want 200), s1 kept %v (want dropped)", got.Sessions, got.KeptS1)
	}
	if b, _ := json.Marshal(got.Long); string(b) != "[350,300,300,300]" {
		t.Errorf("a session of 350 events: count, events, ids, task states %s; want [350,300,300,300]", b)
	}
}
