package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// hostile is text a publisher controls, shown by the console: it must stay
// text (textContent), never markup.
const hostile = `<script>window.pwned=1</script><img src=x onerror="window.pwned=2">`

// fleetR is a dialect R event of session at seq, stamped now plus offset,
// with data.
func fleetR(session, typ string, seq int, at time.Time, extra, data string) string {
	id := fmt.Sprintf("01FLEET%s%04d", strings.ToUpper(strings.ReplaceAll(session, "_", "")), seq)
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"aep":"0.1","id":%q,"type":%q,"time":%q,"source":"aep://host-a/agent/claude-code/session/%s","agent":"claude-code","session":%q,"seq":%d,"epoch":0%s,"data":%s}`,
		id, typ, at.UTC().Format("2006-01-02T15:04:05.000Z07:00"), session, session, seq, extra, data)
}

// fleetTask is a dialect D task event of sess_fleet's task_fleet in state.
func fleetTask(n int, state string) string {
	payload := fmt.Sprintf(`{"task_id":"task_fleet","state":%q}`, state)
	return fmt.Sprintf(`{"aep_version":"0.1","id":"evt_fleet_%d","type":"task.%s","source":"tool:web_crawler","target":"agent:researcher","session_id":"sess_fleet","task_id":"task_fleet","created_at":%q,"payload":%s}`,
		n, state, time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"), payload)
}

// elementShot saves a screenshot of the element sel as name in
// EnvScreenshotDir, if set.
func (b *browser) elementShot(sel, name string) {
	b.t.Helper()
	dir := os.Getenv(EnvScreenshotDir)
	if dir == "" {
		return
	}
	png := get(b, "screenshot "+name, chromedp.Screenshot(chromedp.CSS(sel)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d bytes)", filepath.Join(dir, name), len(png))
}

// jsRow is the cells of the row of table whose first cell is first,
// joined by "|" ("" when there is none).
func jsRow(table, first string) string {
	return fmt.Sprintf(`(() => { const r = [...document.querySelectorAll("#%s tbody tr")].find((r) => r.cells[0].textContent === %q);
  return r ? [...r.cells].map((c) => c.textContent).join("|") : ""; })()`, table, first)
}

// The fleet view in headless Chromium against the built binary: sessions of
// both dialects published before the page opened are listed (the page
// reads the last 15 minutes with since=); a dialect R session with a run,
// three tool calls (one failed, one named with markup), an attention
// request nobody answered, and a D task moving submitted → accepted →
// started → progress → completed, published while the page is open, show in
// the sessions table with their counts and in each session's timeline with
// durations, the failed call and the waiting request marked; the rate
// charts have points; the markup stays text; 205 more sessions leave 200.
// Screenshots console-fleet.png, console-timeline-r.png,
// console-timeline-d.png.
func TestConsoleFleetChromium(t *testing.T) {
	const key = "k-console-fleet"
	br, g := startConsole(t, key, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	postR := func(events ...string) {
		t.Helper()
		res, err := g.post(ctx, "/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer " + key, "AEP-Version": "0.1"}, strings.Join(events, "\n")+"\n")
		if err != nil || res.status != http.StatusAccepted {
			t.Fatalf("publish R: %v %d %s", err, res.status, res.body)
		}
	}
	postD := publisher(ctx, t, g, key)

	// Before the page opens: an R session and a D session.
	now := time.Now()
	postR(fleetR("s_before", "session.started", 0, now, "", `{}`), fleetR("s_before", "run.started", 1, now, `"run":"r_b"`, `{}`))
	postD(consoleEvent("evt_before_1", "task.submitted", "agent:early", "sess_before", `{"task_id":"task_b","state":"submitted"}`))

	br.run("open the console", chromedp.Navigate(g.URL+"/console/?access_token="+key))
	br.waitFor("both session streams live", `document.getElementById("sessions-status").textContent.endsWith("R stream live, D stream live")`,
		`document.getElementById("sessions-status").textContent`, 15*time.Second)
	br.waitFor("the sessions published before the page opened", `document.querySelectorAll("#sessions tbody tr").length === 2`, jsRows("sessions"), 10*time.Second)
	for first, want := range map[string]string{
		"s_before":    "s_before|R|claude-code|run.started|0:1|",
		"sess_before": "sess_before|D|agent:early|task.submitted|-|",
	} {
		if r := br.eval(jsRow("sessions", first)); !strings.HasPrefix(r, want) {
			t.Errorf("session published before the page opened: %q, want %q...", r, want)
		}
	}

	// While it is open: the R session s_fleet.
	t0 := time.Now().Add(-10 * time.Second)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	postR(
		fleetR("s_fleet", "session.started", 0, ms(0), "", `{}`),
		fleetR("s_fleet", "run.started", 1, ms(100), `"run":"r_1"`, `{"trigger":"user"}`),
		fleetR("s_fleet", "tool.requested", 2, ms(1000), `"run":"r_1","subject":"Bash"`, `{"tool":{"name":"Bash","call_id":"t_1"}}`),
		fleetR("s_fleet", "tool.completed", 3, ms(2240), `"run":"r_1","subject":"Bash"`, `{"tool":{"name":"Bash","call_id":"t_1"},"status":"success","duration_ms":1240}`),
		fleetR("s_fleet", "tool.requested", 4, ms(3000), `"run":"r_1","subject":"Write"`, `{"tool":{"name":"Write","call_id":"t_2"}}`),
		fleetR("s_fleet", "tool.failed", 5, ms(3310), `"run":"r_1","subject":"Write","severity":"error"`, `{"tool":{"name":"Write","call_id":"t_2"},"error":{"type":"io_error","message":"ENOSPC: no space left on device"},"duration_ms":310}`),
		fleetR("s_fleet", "tool.requested", 6, ms(4000), `"run":"r_1"`, fmt.Sprintf(`{"tool":{"name":%q,"call_id":"t_3"}}`, hostile)),
		fleetR("s_fleet", "tool.completed", 7, ms(4500), `"run":"r_1"`, fmt.Sprintf(`{"tool":{"name":%q,"call_id":"t_3"},"status":"success"}`, hostile)),
		fleetR("s_fleet", "attention.requested", 8, ms(5000), `"run":"r_1","subject":"Bash","severity":"notice"`, fmt.Sprintf(`{"kind":"permission","prompt":%q,"options":[{"id":"allow","label":"Allow"}]}`, "Permission requested: Bash — rm -rf build/ "+hostile)),
	)
	br.waitFor("s_fleet counted", jsRow("sessions", "s_fleet")+`.split("|")[6] === "9"`, jsRows("sessions"), 10*time.Second)
	// runs | tool calls | attention waiting | errors | tasks
	if r := strings.Split(br.eval(jsRow("sessions", "s_fleet")), "|"); len(r) != 12 || strings.Join(r[7:], "|") != "1|3 (1 failed)|1|1|-" {
		t.Errorf("s_fleet row %q: want runs 1, tool calls 3 (1 failed), 1 waiting, 1 error, no task", r)
	}

	// The D task, one state at a time: the sessions table follows it.
	states := []string{"submitted", "accepted", "started", "progress", "completed"}
	for i, st := range states {
		postD(fleetTask(i+1, st))
		br.waitFor("task_fleet "+st, jsRow("sessions", "sess_fleet")+`.endsWith("|`+st+`")`, jsRows("sessions"), 10*time.Second)
	}
	br.waitFor("the fleet summary", `document.getElementById("fleet-summary").textContent.includes("4 sessions")`, `document.getElementById("fleet-summary").textContent`, 5*time.Second)
	if s := br.eval(`document.getElementById("fleet-summary").textContent`); !strings.Contains(s, "1 attention requests waiting, 1 errors, 2 tasks") {
		t.Errorf("fleet summary %q", s)
	}
	if a := br.eval(jsRow("agents", "claude-code")); !strings.HasPrefix(a, "claude-code|R|2|2|11|") {
		t.Errorf("agents row %q: want claude-code, R, 2 sessions, 2 active, 11 events", a)
	}

	// Rate charts: the tenant's and per type, 60 points each.
	charts := br.eval(`[...document.querySelectorAll("#rates figure")].map((f) => f.dataset.type + ":" + f.dataset.sum + ":" + f.querySelector("polyline").getAttribute("points").split(" ").length).join(",")`)
	if !strings.HasPrefix(charts, "tenant (all types):17:60,") || !strings.Contains(charts, "tool.requested:3:60") {
		t.Errorf("rate charts %q: want the tenant's 17 events and tool.requested's 3, 60 points each", charts)
	}
	br.elementShot("#fleet", "console-fleet.png")

	// The R session's timeline.
	br.click("select s_fleet", `#sessions tr[data-session="s_fleet"][data-dialect="r"] td`)
	br.waitFor("the timeline of s_fleet", `document.querySelectorAll("#timeline tbody tr").length === 5`, jsRows("timeline"), 5*time.Second)
	rows := strings.Split(br.eval(`[...document.querySelectorAll("#timeline tbody tr")].map((r) => r.dataset.kind + "|" + r.cells[2].textContent + "|" + r.dataset.status + "|" + r.cells[4].textContent + "|" + r.cells[6].textContent + "|" + getComputedStyle(r.cells[3]).color).join("\n")`), "\n")
	red, amber := "rgb(176, 0, 32)", "rgb(138, 90, 0)"
	for i, want := range []string{
		"run|r_1|running|running ",
		"tool|Bash|completed|1.24 s||",
		"tool|Write|failed|310 ms|ENOSPC: no space left on device|" + red,
		"tool|" + hostile + "|completed|500 ms||",
		"attention|permission|waiting|waiting ",
	} {
		if i >= len(rows) || !strings.HasPrefix(rows[i], want) {
			t.Errorf("timeline row %d: %q, want %q...", i, rows, want)
		}
	}
	if len(rows) == 5 && (!strings.HasSuffix(rows[4], hostile+"|"+amber) || !strings.Contains(rows[4], "rm -rf build/")) {
		t.Errorf("the waiting attention request %q: want its prompt, text, in amber", rows[4])
	}
	if got := br.eval(`String(document.querySelectorAll("script:not([src]), img").length) + " " + String(window.pwned)`); got != "0 undefined" {
		t.Errorf("markup in events became elements or ran: %q", got)
	}
	br.elementShot("#fleet", "console-timeline-r.png")

	// The D session's timeline: the task's states in order.
	br.click("select sess_fleet", `#sessions tr[data-session="sess_fleet"][data-dialect="d"] td`)
	br.waitFor("the timeline of sess_fleet", `document.querySelector("#timeline tbody tr")?.dataset.kind === "task"`, jsRows("timeline"), 5*time.Second)
	if r := br.eval(jsRows("timeline")); !strings.Contains(r, "|task|task_fleet|completed|") || !strings.HasSuffix(r, "|submitted → accepted → started → progress → completed") {
		t.Errorf("task timeline %q", r)
	}
	br.elementShot("#fleet", "console-timeline-d.png")

	// Past the bound: 205 more sessions, 200 kept, the oldest dropped.
	var bulk []string
	for i := range 205 {
		bulk = append(bulk, consoleEvent(fmt.Sprintf("evt_bulk_%d", i), "task.progress", "agent:bulk", fmt.Sprintf("sess_bulk_%03d", i), `{}`))
	}
	postD(bulk...)
	// (in the order the partitions are read, not the order published)
	br.waitFor("200 sessions", `document.getElementById("sessions-status").textContent.startsWith("200 sessions;")`,
		`document.getElementById("sessions-status").textContent`, 10*time.Second)
	if n := br.eval(`[...document.querySelectorAll("#sessions tbody tr")].filter((r) => r.dataset.session.startsWith("sess_bulk_")).length + " of " + document.querySelectorAll("#sessions tbody tr").length`); n != "200 of 200" {
		t.Errorf("after 205 more sessions: %s rows are of them, want 200 of 200 (the four older ones dropped)", n)
	}

	if p := br.problems("favicon.ico"); len(p) > 0 {
		t.Errorf("the page reported problems: %v", p)
	}
}
