package principal

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// Match agrees with the regular expression it stands for ('*' as ".+")
// on random patterns and subjects over a small alphabet, stars in the
// subject included.
func TestMatchAgreesWithRegexp(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	const alpha = "ab.*"
	gen := func(n int) string {
		var b strings.Builder
		for range rnd.IntN(n) {
			b.WriteByte(alpha[rnd.IntN(len(alpha))])
		}
		return b.String()
	}
	for range 200_000 {
		p, s := gen(7), gen(9)
		re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(p), `\*`, ".+") + "$")
		if got, want := Match(p, s), re.MatchString(s); got != want {
			t.Fatalf("Match(%q, %q) = %v, want %v", p, s, got, want)
		}
	}
}

func TestScopes(t *testing.T) {
	s, err := ParseScopes("subscribe:task.* read:agent,write:agent:ui emit:agent:a")
	if err != nil {
		t.Fatal(err)
	}
	p := &Principal{ID: "dash", Method: MethodAPIKey, Scopes: s}
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"emit as its own source", p.MayEmitAs("agent:a"), true},
		{"emit as another agent", p.MayEmitAs("agent:b"), false},
		{"emit as a prefix of its own", p.MayEmitAs("agent:"), false},
		{"target in write", p.MayTarget("agent:ui"), true},
		{"target outside write", p.MayTarget("agent:b"), false},
		{"no control", p.MayControl(), false},
		{"read task from agent", p.MayRead("task.progress", "agent:x"), true},
		{"read memory", p.MayRead("memory.updated", "agent:x"), false},
		{"read from a tool", p.MayRead("task.progress", "tool:x"), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if bad := p.CoverTypes([]string{"task.*", "task.progress"}); bad != "" {
		t.Errorf("task patterns refused: %q", bad)
	}
	for _, req := range [][]string{{"memory.*"}, {"*"}, nil, {"task.*", "*.progress"}} {
		if bad := p.CoverTypes(req); bad == "" {
			t.Errorf("types %q covered by subscribe:task.*", req)
		}
	}
	if bad := p.CoverSources([]string{"agent:b"}); bad != "" {
		t.Errorf("source agent:b refused: %q", bad)
	}
	if bad := p.CoverSources(nil); bad != "*" {
		t.Errorf("with read: scopes, no source filter needs read:*: got %q", bad)
	}
	typesOnly, _ := ParseScopes("subscribe:task.*")
	if q := (&Principal{Scopes: typesOnly}); q.CoverSources([]string{"tool:x"}) != "" || !q.MayRead("task.a", "tool:x") || q.MayRead("memory.a", "tool:x") {
		t.Error("without read: scopes every source of the allowed types may be read")
	}
	var unrestricted *Principal
	if !unrestricted.MayEmitAs("x") || !unrestricted.MayControl() || unrestricted.CoverTypes(nil) != "" || unrestricted.Restricted() {
		t.Error("a nil principal is the tenant-wide default: everything allowed")
	}
	if (&Principal{ID: "k"}).Restricted() {
		t.Error("a principal without scopes is tenant-wide")
	}
}

func TestParseScopesRefuses(t *testing.T) {
	for _, in := range []string{"read", "read:", "delete:x", "subscribe", strings.Repeat("emit:a,", MaxScopes+1), "emit:" + strings.Repeat("a", MaxScopeBytes)} {
		if _, err := ParseScopes(in); err == nil {
			t.Errorf("%.40q accepted", in)
		}
	}
	s, err := ParseScopes("")
	if err != nil {
		t.Fatal(err)
	}
	if p := (&Principal{Scopes: s}); p.MayEmitAs("agent:a") || p.MayControl() || p.CoverTypes([]string{"a"}) == "" {
		t.Error("an empty scope list allows nothing")
	}
}
