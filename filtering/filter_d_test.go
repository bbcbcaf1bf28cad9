package filtering

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

func dType(t string) *aep.Attrs {
	return &aep.Attrs{Dialect: aep.DialectD, Type: t, Source: "src"}
}

// TestDTypePatterns covers every row of seed 000's pattern table and the
// rules under it, with counter-examples.
func TestDTypePatterns(t *testing.T) {
	cases := []struct {
		pattern, typ string
		want         bool
	}{
		// "*": all event types.
		{"*", "memory.fact.added", true},
		{"*", "task.progress", true},
		{"*", "a", true},
		// "memory.*": all memory.* events.
		{"memory.*", "memory.fact.added", true},
		{"memory.*", "memory.episode.stored", true},
		{"memory.*", "memory.fact", true},
		{"memory.*", "memory", false},
		{"memory.*", "memory.", false},
		{"memory.*", "memoryx.fact", false},
		{"memory.*", "context.memory.fact", false},
		// "tool.call.*".
		{"tool.call.*", "tool.call.started", true},
		{"tool.call.*", "tool.call.progress.partial", true},
		{"tool.call.*", "tool.call", false},
		{"tool.call.*", "tool.calls.started", false},
		// "tool.*.progress": exactly one segment in the middle.
		{"tool.*.progress", "tool.call.progress", true},
		{"tool.*.progress", "tool.any.progress", true},
		{"tool.*.progress", "tool.progress", false},
		{"tool.*.progress", "tool.call.x.progress", false},
		{"tool.*.progress", "tool..progress", false},
		{"tool.*.progress", "tool.call.progress.more", false},
		// "task.progress": exact match only.
		{"task.progress", "task.progress", true},
		{"task.progress", "task.progress.more", false},
		{"task.progress", "task", false},
		{"task.progress", "task.progres", false},
		// Case-sensitive.
		{"task.progress", "Task.progress", false},
		{"Memory.*", "memory.fact", false},
		{"Memory.*", "Memory.fact", true},
		// Leading and combined stars.
		{"*.progress", "task.progress", true},
		{"*.progress", "progress", false},
		{"*.progress", "a.b.progress", false},
		{"*.*", "a.b", true},
		{"*.*", "a.b.c", true},
		{"*.*", "a", false},
		{"tool.*.*", "tool.call.progress", true},
		{"tool.*.*", "tool.call", false},
		{"a.*.b.*", "a.x.b.y.z", true},
		{"a.*.b.*", "a.x.b", false},
		// Unicode segments are bytes compared exactly.
		{"événement.*", "événement.créé", true},
		{"événement.*", "evenement.cree", false},
	}
	for _, c := range cases {
		f := mustD(t, `{"types":`+jsonQ(c.pattern)+`}`)
		if got := f.Match(dType(c.typ)); got != c.want {
			t.Errorf("pattern %q type %q: got %v want %v", c.pattern, c.typ, got, c.want)
		}
	}
}

func jsonQ(s string) string { return string(jsonString(s)) }

func TestDMatch(t *testing.T) {
	ev := &aep.Attrs{
		Dialect: aep.DialectD, Type: "memory.fact.added", Source: "memory:main",
		Target: "agent:researcher", Topic: "tasks.task_01", Session: "sess_01",
		Conversation: "conv_01", Task: "task_01",
	}
	cases := []struct {
		name, filter string
		want         bool
	}{
		{"seed example", `{"types":["memory.*","context.*"],"source":["memory:main"],"target":"agent:researcher",
			"topic":"tasks.task_01","session_id":"sess_01","conversation_id":"conv_01","task_id":"task_01",
			"from_cursor":"stream_01:42","delivery_mode":"at_least_once"}`, true},
		{"types any-of", `{"types":["context.*","memory.*"]}`, true},
		{"types none", `{"types":["context.*","tool.*"]}`, false},
		{"source string", `{"source":"memory:main"}`, true},
		{"source array", `{"source":["x","memory:main"]}`, true},
		{"source miss", `{"source":"memory:other"}`, false},
		{"target", `{"target":"agent:researcher"}`, true},
		{"target miss", `{"target":"agent:other"}`, false},
		{"topic", `{"topic":["tasks.task_01"]}`, true},
		{"topic is exact, not a pattern", `{"topic":"tasks.*"}`, false},
		{"session scope", `{"types":"*","session_id":"sess_01"}`, true},
		{"session scope miss", `{"types":"*","session_id":"sess_02"}`, false},
		{"conversation", `{"types":"*","conversation_id":["conv_01"]}`, true},
		{"conversation miss", `{"types":"*","conversation_id":["conv_02"]}`, false},
		{"task", `{"types":"*","task_id":"task_01"}`, true},
		{"task miss", `{"types":"*","task_id":"task_02"}`, false},
		{"all fields one misses", `{"types":"memory.*","source":"memory:main","task_id":"task_02"}`, false},
		{"case-sensitive values", `{"source":"Memory:main"}`, false},
		{"many values hashed", `{"source":["a","b","c","d","e","f","g","h","i","j","k","l","m","memory:main"]}`, true},
		{"many values hashed miss", `{"source":["a","b","c","d","e","f","g","h","i","j","k","l","m","n"]}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := mustD(t, c.filter)
			if got := f.Match(ev); got != c.want {
				t.Fatalf("got %v want %v", got, c.want)
			}
			// A dialect D filter never matches an R event.
			r := *ev
			r.Dialect = aep.DialectR
			if f.Match(&r) {
				t.Fatal("matched a dialect R event")
			}
			u := r
			u.Dialect = aep.DialectUnknown
			if f.Match(&u) {
				t.Fatal("matched an event of unknown dialect")
			}
		})
	}
	// An absent event field never matches a constrained filter field.
	bare := &aep.Attrs{Dialect: aep.DialectD, Type: "memory.fact.added", Source: "memory:main"}
	for _, fl := range []string{`{"types":"*","target":"t"}`, `{"types":"*","topic":"t"}`, `{"types":"*","session_id":"s"}`,
		`{"types":"*","conversation_id":"c"}`, `{"types":"*","task_id":"t"}`} {
		if mustD(t, fl).Match(bare) {
			t.Errorf("%s matched an event without the field", fl)
		}
	}
}

func TestDCarried(t *testing.T) {
	f := mustD(t, `{"types":"a.b","from_cursor":"stream_01:42","delivery_mode":"replayable","subscription_id":"x","extra":{"k":[1]}}`)
	if f.FromCursor() != "stream_01:42" || f.DeliveryMode() != "replayable" || f.Dialect() != aep.DialectD {
		t.Fatalf("carried fields: %q %q %v", f.FromCursor(), f.DeliveryMode(), f.Dialect())
	}
	if got := strings.Join(f.IgnoredKeys(), ","); got != "subscription_id,extra" {
		t.Fatalf("ignored keys %q", got)
	}
	for _, m := range deliveryModes {
		if mustD(t, `{"types":"a.b","delivery_mode":"`+m+`"}`).DeliveryMode() != m {
			t.Fatalf("mode %s not carried", m)
		}
	}
	if mustD(t, `{"types":"a.b"}`).DeliveryMode() != "" {
		t.Fatal("absent delivery_mode not empty")
	}
}

func TestDNormalized(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"types":"memory.*"}`, `{"types":["memory.*"]}`},
		{`{"task_id":"t","types":["a.b","a.b","c.*"],"source":"s","delivery_mode":"best_effort","from_cursor":"c"}`,
			`{"types":["a.b","c.*"],"source":["s"],"task_id":["t"],"from_cursor":"c","delivery_mode":"best_effort"}`},
		{`{"types":["memory.*","*","tool.*"]}`, `{"types":["*"]}`},
		{`{"topic":"t","x":1}`, `{"topic":["t"]}`},
	}
	for _, c := range cases {
		f := mustD(t, c.in)
		if got := f.String(); got != c.want {
			t.Errorf("%s normalized to %s, want %s", c.in, got, c.want)
		}
		if again := mustD(t, f.String()).String(); again != c.want {
			t.Errorf("%s renormalized to %s", c.want, again)
		}
	}
}

func TestDReject(t *testing.T) {
	long := strings.Repeat("a", DefaultLimits.MaxValueLen+1)
	var many strings.Builder
	for i := 0; i <= DefaultLimits.MaxValues; i++ {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`"v` + itoa(i) + `"`)
	}
	cases := []struct {
		name, filter, field, msg string
	}{
		{"empty filter", `{}`, "", "at least one filter criterion"},
		{"only carried fields", `{"delivery_mode":"best_effort","from_cursor":"c"}`, "", "at least one filter criterion"},
		{"only unknown fields", `{"type":"memory.*"}`, "", "at least one filter criterion"},
		{"scope only", `{"session_id":"s"}`, "", "at least one of types, source, target or topic"},
		{"scopes only", `{"conversation_id":"c","task_id":"t"}`, "", "at least one of types, source, target or topic"},
		{"not an object", `["memory.*"]`, "", "JSON object"},
		{"not JSON", `{"types":`, "", "JSON"},
		{"trailing data", `{"types":"a.b"}x`, "", "after the JSON value"},
		{"invalid UTF-8", "{\"types\":\"a.\xff\"}", "", "UTF-8"},
		{"duplicate key", `{"types":"a.b","types":"c.d"}`, "", "more than once"},
		{"null", `{"types":null}`, "types", "string or an array"},
		{"number", `{"source":5}`, "source", "string or an array"},
		{"object", `{"target":{"eq":"x"}}`, "target", "string or an array"},
		{"non-string in array", `{"types":["a.b",5]}`, "types", "only strings"},
		{"nested array", `{"topic":[["x"]]}`, "topic", "only strings"},
		{"empty array", `{"types":[]}`, "types", "empty array"},
		{"empty source array", `{"types":"*","source":[]}`, "source", "empty array"},
		{"empty string", `{"source":""}`, "source", "empty string"},
		{"empty pattern", `{"types":[""]}`, "types", "empty string"},
		{"empty segment", `{"types":"a..b"}`, "types", "empty segment"},
		{"leading dot", `{"types":".a"}`, "types", "empty segment"},
		{"trailing dot", `{"types":"a."}`, "types", "empty segment"},
		{"partial wildcard", `{"types":"mem*"}`, "types", "whole segment"},
		{"partial wildcard 2", `{"types":"memory.f*"}`, "types", "whole segment"},
		{"double star", `{"types":"memory.**"}`, "types", "whole segment"},
		{"bad delivery mode", `{"types":"a.b","delivery_mode":"exactly_once"}`, "delivery_mode", "not one of"},
		{"delivery mode not string", `{"types":"a.b","delivery_mode":1}`, "delivery_mode", "must be a string"},
		{"cursor not string", `{"types":"a.b","from_cursor":42}`, "from_cursor", "must be a string"},
		{"cursor empty", `{"types":"a.b","from_cursor":""}`, "from_cursor", "must not be empty"},
		{"value too long", `{"source":"` + long + `"}`, "source", "limit"},
		{"cursor too long", `{"types":"a.b","from_cursor":"` + long + `"}`, "from_cursor", "limit"},
		{"too many values", `{"source":[` + many.String() + `]}`, "source", "limit"},
		{"too many segments", `{"types":"` + strings.Repeat("a.", DefaultLimits.MaxSegments) + `b"}`, "types", "limit"},
		{"too big", `{"source":"` + strings.Repeat("a", DefaultLimits.MaxBytes) + `"}`, "", "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseD([]byte(c.filter))
			if err == nil {
				t.Fatalf("accepted: %s", f)
			}
			fe := filterErr(t, err, aep.DialectD, CodeSubscriptionRejected)
			if fe.Field != c.field || !strings.Contains(fe.Message, c.msg) {
				t.Fatalf("field %q message %q, want %q containing %q", fe.Field, fe.Message, c.field, c.msg)
			}
			if fe.Retryable() {
				t.Fatal("retryable")
			}
		})
	}
}

func TestDTotalValuesLimit(t *testing.T) {
	lim := Limits{MaxTotalValues: 3}
	if _, err := lim.ParseD([]byte(`{"types":["a.b","c.d"],"source":"s"}`)); err != nil {
		t.Fatalf("3 values refused: %v", err)
	}
	_, err := lim.ParseD([]byte(`{"types":["a.b","c.d"],"source":["s","t"]}`))
	fe := filterErr(t, err, aep.DialectD, CodeSubscriptionRejected)
	if !strings.Contains(fe.Message, "limit") {
		t.Fatalf("message %q", fe.Message)
	}
	_, err = Limits{MaxTotalValues: 3}.ParseR([]byte(`{"type":["a.b","c.d"],"source":["s","t"]}`))
	_ = filterErr(t, err, aep.DialectR, CodeLimitExceeded)
}

func TestDQuery(t *testing.T) {
	ev := &aep.Attrs{Dialect: aep.DialectD, Type: "task.progress", Source: "agent:a", Session: "sess_01"}
	cases := []struct {
		name, query, want string // want: normalized filter
		match             bool
	}{
		{"repeated and comma", "types=a.b,c.d&types=task.*", `{"types":["a.b","c.d","task.*"]}`, true},
		{"session with all types", "types=*&session_id=sess_01", `{"types":["*"],"session_id":["sess_01"]}`, true},
		{"other session", "session_id=sess_02&types=*", `{"types":["*"],"session_id":["sess_02"]}`, false},
		{"task with all types", "task_id=t1&types=*", `{"types":["*"],"task_id":["t1"]}`, false},
		{"conversation with all types", "conversation_id=c1,c2&types=*", `{"types":["*"],"conversation_id":["c1","c2"]}`, false},
		{"source and session", "source=agent:a&session_id=sess_01", `{"source":["agent:a"],"session_id":["sess_01"]}`, true},
		{"everything", "types=task.*&source=agent:a&target=x&topic=t&session_id=s&conversation_id=c&task_id=k&from_cursor=cur,1&delivery_mode=replayable",
			`{"types":["task.*"],"source":["agent:a"],"target":["x"],"topic":["t"],"session_id":["s"],"conversation_id":["c"],"task_id":["k"],"from_cursor":"cur,1","delivery_mode":"replayable"}`, false},
		{"other parameters ignored", "types=*&access_token=secret&foo=bar", `{"types":["*"]}`, true},
		{"duplicates removed", "types=a.b,a.b&types=a.b", `{"types":["a.b"]}`, false},
		{"escaped comma is still a separator", "types=a.b%2Ctask.progress", `{"types":["a.b","task.progress"]}`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := url.ParseQuery(c.query)
			if err != nil {
				t.Fatal(err)
			}
			f, err := ParseDQuery(q)
			if err != nil {
				t.Fatalf("ParseDQuery(%s): %v", c.query, err)
			}
			if f.String() != c.want {
				t.Fatalf("normalized %s, want %s", f, c.want)
			}
			if f.Match(ev) != c.match {
				t.Fatalf("match %v, want %v", !c.match, c.match)
			}
			// The same filter in JSON form compiles to the same thing.
			if g := mustD(t, f.String()); g.String() != f.String() {
				t.Fatalf("JSON form %s", g)
			}
		})
	}
	rejects := []struct{ name, query, msg string }{
		{"nothing", "", "at least one filter criterion; types=* receives every event"},
		{"only foreign parameters", "access_token=x", "at least one filter criterion"},
		{"only carried", "delivery_mode=best_effort", "at least one filter criterion"},
		{"session only", "session_id=sess_01", "at least one of types, source, target or topic"},
		{"session only suggests types=*", "session_id=sess_01&from_cursor=c", "add types=*"},
		{"task only", "task_id=t1", "at least one of types, source, target or topic"},
		{"conversation only", "conversation_id=c1,c2", "at least one of types, source, target or topic"},
		{"all scopes", "session_id=s&conversation_id=c&task_id=t", "at least one of types, source, target or topic"},
		{"empty value", "types=", "empty string"},
		{"empty element", "types=a.b,,c.d", "empty string"},
		{"trailing comma", "source=a,", "empty string"},
		{"bad pattern", "types=a..b", "empty segment"},
		{"repeated cursor", "types=*&from_cursor=a&from_cursor=b", "once"},
		{"empty cursor", "types=*&from_cursor=", "must not be empty"},
		{"repeated mode", "types=*&delivery_mode=best_effort&delivery_mode=best_effort", "once"},
		{"bad mode", "types=*&delivery_mode=fast", "not one of"},
	}
	for _, c := range rejects {
		t.Run("reject/"+c.name, func(t *testing.T) {
			q, _ := url.ParseQuery(c.query)
			_, err := ParseDQuery(q)
			fe := filterErr(t, err, aep.DialectD, CodeSubscriptionRejected)
			if !strings.Contains(fe.Message, c.msg) {
				t.Fatalf("message %q, want %q", fe.Message, c.msg)
			}
		})
	}
	// The JSON body form refuses the same way, with the same suggestion.
	_, err := ParseD([]byte(`{"session_id":"sess_01"}`))
	if fe := filterErr(t, err, aep.DialectD, CodeSubscriptionRejected); !strings.Contains(fe.Message, "add types=*") {
		t.Fatalf("JSON form message %q does not suggest types=*", fe.Message)
	}
}

// TypePatterns and Sources are what a principal's scopes are checked
// against: the patterns as written, nil for "every type" or "any source".
func TestFilterTypePatternsAndSources(t *testing.T) {
	for _, c := range []struct {
		in          string
		types, srcs []string
	}{
		{`{"types":["task.*","memory.updated"],"source":["agent:a","agent:b"]}`, []string{"task.*", "memory.updated"}, []string{"agent:a", "agent:b"}},
		{`{"types":["task.*","*"]}`, nil, nil},
		{`{"topic":"t1"}`, nil, nil},
		{`{"source":"tool:x"}`, nil, []string{"tool:x"}},
	} {
		f, err := ParseD([]byte(c.in))
		if err != nil {
			t.Fatal(c.in, err)
		}
		if got := f.TypePatterns(); !slices.Equal(got, c.types) {
			t.Errorf("%s: types %q, want %q", c.in, got, c.types)
		}
		if got := f.Sources(); !slices.Equal(got, c.srcs) {
			t.Errorf("%s: sources %q, want %q", c.in, got, c.srcs)
		}
	}
}
