package partitioning

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
)

func TestHeadersRoundTrip(t *testing.T) {
	cases := []aep.Attrs{
		{Dialect: aep.DialectD, ID: "evt_1", Type: "task.progress", Source: "agent:a", Session: "sess_01",
			Conversation: "conv_01", Task: "task_01", Target: "agent:b", Topic: "tasks.task_01",
			Correlation: "evt_0", Causation: "evt_00", DeliveryMode: "at_least_once"},
		{Dialect: aep.DialectR, ID: "01J", Type: "tool.requested", Source: "aep://host/claude-code/s1",
			Agent: "claude-code", Subject: "Bash", Session: "s1", Run: "r1", Step: "st1", Cause: "c1",
			Severity: "notice", Capture: "full", Epoch: 0, HasEpoch: true, Seq: 42, HasSeq: true,
			Ext: []aep.Ext{{Name: "x_team", Value: []byte(`"blue"`)}, {Name: "x_n", Value: []byte(`5`)}}},
		{Dialect: aep.DialectR, ID: "02", Type: "agent.heartbeat", Source: "aep://h/a"}, // agent-scoped: no session
	}
	for _, in := range cases {
		hs := AppendHeaders(nil, &in)
		var out aep.Attrs
		if err := DecodeHeaders(hs, &out); err != nil {
			t.Fatalf("decode %+v: %v", in, err)
		}
		if len(in.Ext) == 0 {
			in.Ext = out.Ext[:0] // nil vs empty slice is not a difference
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("round trip:\n in  %+v\n out %+v", in, out)
		}
	}
}

// Records built from one shared buffer carry the same headers as records
// built alone, however small the buffer starts, and appending to one
// header's value never reaches the next.
func TestAppendHeadersToSharedBuffer(t *testing.T) {
	evs := []aep.Attrs{
		{Dialect: aep.DialectR, ID: "01J", Type: "tool.requested", Source: "aep://h/a", Session: "s1", Run: "r1",
			Epoch: -7, HasEpoch: true, Seq: 1 << 40, HasSeq: true, Ext: []aep.Ext{{Name: "x_n", Value: []byte(`5`)}}},
		{Dialect: aep.DialectD, ID: "evt_2", Type: "task.progress", Source: "agent:a", Task: "t"},
	}
	for _, start := range []int{0, 3, HeaderValuesLen(&evs[0]) + HeaderValuesLen(&evs[1])} {
		buf := make([]byte, 0, start)
		var got [][]kgo.RecordHeader
		for i := range evs {
			var hs []kgo.RecordHeader
			hs, buf = AppendHeadersTo(nil, buf, &evs[i])
			got = append(got, hs)
		}
		for i := range evs {
			if want := AppendHeaders(nil, &evs[i]); !reflect.DeepEqual(got[i], want) {
				t.Errorf("buffer of %d, event %d:\n got %+v\nwant %+v", start, i, got[i], want)
			}
			if n := len(got[i][0].Value); cap(got[i][0].Value) != n {
				t.Errorf("buffer of %d, event %d: value capacity %d over its length %d", start, i, cap(got[i][0].Value), n)
			}
		}
	}
	for i := range evs {
		if n := len(AppendHeaders(nil, &evs[i])); n == 0 {
			t.Fatalf("event %d: no headers", i)
		}
	}
}

func TestHeadersOmitAbsent(t *testing.T) {
	a := aep.Attrs{Dialect: aep.DialectD, ID: "e", Type: "a.b", Source: "s"}
	hs := AppendHeaders(nil, &a)
	if len(hs) != 4 {
		t.Fatalf("want 4 headers (dialect,id,type,source), got %d: %+v", len(hs), hs)
	}
}

func TestDecodeHeadersRejectsBadSeq(t *testing.T) {
	var a aep.Attrs
	err := DecodeHeaders([]kgo.RecordHeader{{Key: HeaderSeq, Value: []byte("x1")}}, &a)
	if err == nil {
		t.Fatal("malformed aep-seq accepted")
	}
}

func TestDecodeHeadersIgnoresForeign(t *testing.T) {
	var a aep.Attrs
	hs := []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-x")}, {Key: HeaderType, Value: []byte("a.b")}}
	if err := DecodeHeaders(hs, &a); err != nil || a.Type != "a.b" {
		t.Fatalf("got %+v, %v", a, err)
	}
}

func TestKeyStrategies(t *testing.T) {
	a := aep.Attrs{Source: "src", Session: "sess", Conversation: "conv", Task: "task"}
	if got := KeySession.Key(&a); got != "sess" {
		t.Errorf("session strategy = %q", got)
	}
	if got := KeyBinding.Key(&a); got != "task" {
		t.Errorf("binding strategy = %q", got)
	}
	a.Task = ""
	if got := KeyBinding.Key(&a); got != "conv" {
		t.Errorf("binding without task = %q", got)
	}
	b := aep.Attrs{Source: "src"}
	if KeySession.Key(&b) != "src" || KeyBinding.Key(&b) != "src" {
		t.Error("no session must fall back to source")
	}
	if _, err := ParseKeyStrategy("nope"); err == nil {
		t.Error("unknown strategy accepted")
	}
}

func TestNaming(t *testing.T) {
	var n Naming
	if got := n.Events("acme"); got != "aep.acme.events" {
		t.Errorf("events = %q", got)
	}
	if n.DeadLetter("acme") == n.Events("acme") || n.Index("acme") == n.Events("acme") {
		t.Error("derived topics must differ")
	}
	for _, bad := range []string{"", "a.b", "a/b", "ü", string(make([]byte, 65))} {
		if ValidateTenant(bad) == nil {
			t.Errorf("tenant %q accepted", bad)
		}
	}
	if ValidateTenant("tenant_01-x") != nil {
		t.Error("good tenant rejected")
	}
	if (Naming{Template: "no-placeholder"}).Validate() == nil {
		t.Error("template without {tenant} accepted")
	}
	if (Naming{Template: "x.{tenant}/y"}).Validate() == nil {
		t.Error("template with / accepted")
	}
}

func BenchmarkHeadersDecode(b *testing.B) {
	a := aep.Attrs{Dialect: aep.DialectR, ID: "01J", Type: "tool.requested", Source: "aep://h/a/s1",
		Session: "s1", Severity: "info", HasSeq: true, Seq: 42, HasEpoch: true}
	hs := AppendHeaders(nil, &a)
	var out aep.Attrs
	b.ReportAllocs()
	for b.Loop() {
		_ = DecodeHeaders(hs, &out)
	}
}

func TestHeaderCauseOnWire(t *testing.T) {
	// The header name is part of the record format other producers and
	// consumers rely on: pin it, not just the round trip.
	a := aep.Attrs{Dialect: aep.DialectR, ID: "e", Cause: "01JX9YB2Z1QK"}
	for _, h := range AppendHeaders(nil, &a) {
		if h.Key == "aep-cause" {
			if string(h.Value) != "01JX9YB2Z1QK" {
				t.Fatalf("aep-cause = %q", h.Value)
			}
			return
		}
	}
	t.Fatal("no aep-cause header for an event with cause")
}
