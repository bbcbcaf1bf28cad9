package aep

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// benchEvents are typical events of each dialect at about 500 B and 4 KiB.
func benchEvents(tb testing.TB) []struct {
	name string
	raw  []byte
} {
	// R: the AEP-0001 §5.3 worked example with an extension attribute.
	r := `{"aep":"0.1","id":"01JX9YB3P4T9","type":"tool.completed","subject":"Bash","time":"2026-07-03T10:15:04.221Z",` +
		`"source":"aep://host-a/agent/claude-code/session/s_8f2c","agent":"claude-code","session":"s_8f2c","run":"r_0042",` +
		`"step":"turn-3","seq":187,"epoch":0,"cause":"01JX9YB2Z1QK","severity":"info","capture":"metadata",` +
		`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","acmeregion":"eu-1",` +
		`"data":{"tool":{"name":"Bash","call_id":"t_91"},"status":"success","duration_ms":1240,` +
		`"gen_ai.usage.input_tokens":142,"gen_ai.usage.output_tokens":87%s}}`
	// D: a task.progress event with routing members (fixture shape).
	d := `{"aep_version":"0.1","id":"evt_01JZ0000000000000000000000","type":"task.progress","source":"tool:crawler",` +
		`"target":"agent:researcher","topic":"tasks.task_01","task_id":"task_01","session_id":"sess_01",` +
		`"conversation_id":"conv_01","correlation_id":"corr_01","causation_id":"evt_01JZ0000000000000000000001",` +
		`"created_at":"2026-07-09T10:00:10Z","payload_schema":"https://schemas.axisrobo.com/task.progress.v1.json",` +
		`"payload":{"progress":0.5,"message":"crawled 120 of 240 pages","stage":"crawl"%s}}`
	pad := func(tmpl string, size int) []byte {
		base := len(tmpl) - 2
		if size <= base {
			return []byte(strings.Replace(tmpl, "%s", "", 1))
		}
		var sb strings.Builder
		for i := 0; sb.Len() < size-base; i++ {
			sb.WriteString(`,"item` + strconv.Itoa(i) + `":{"path":"src/pkg/file` + strconv.Itoa(i) + `.go","lines":[12,48],"note":"r\u00e9sum\u00e9 of the change"}`)
		}
		return []byte(strings.Replace(tmpl, "%s", sb.String(), 1))
	}
	evs := []struct {
		name string
		raw  []byte
	}{
		{"R-500B", pad(r, 500)},
		{"R-4KiB", pad(r, 4096)},
		{"D-500B", pad(d, 500)},
		{"D-4KiB", pad(d, 4096)},
	}
	for _, e := range evs {
		if _, err := Parse(e.raw, Limits{}); err != nil {
			tb.Fatalf("%s: %v", e.name, err)
		}
	}
	return evs
}

// BenchmarkParse measures validate + extract per event beside two
// encoding/json baselines on the same bytes: json.Valid (syntax only) and
// json.Unmarshal into map[string]any.
func BenchmarkParse(b *testing.B) {
	for _, ev := range benchEvents(b) {
		b.Run(ev.name+"/aep.Parse", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev.raw)))
			for b.Loop() {
				if _, err := Parse(ev.raw, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(ev.name+"/json.Valid", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev.raw)))
			for b.Loop() {
				if !json.Valid(ev.raw) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(ev.name+"/json.Unmarshal-map", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev.raw)))
			for b.Loop() {
				var m map[string]any
				if err := json.Unmarshal(ev.raw, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseInvalid measures the refusal path (an error is built).
func BenchmarkParseInvalid(b *testing.B) {
	raw := []byte(`{` + baseR + `,"session":"s1","seq":-1}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw, Limits{}); err == nil {
			b.Fatal("accepted")
		}
	}
}
