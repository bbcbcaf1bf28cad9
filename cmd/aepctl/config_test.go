package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
)

func TestParseConfig(t *testing.T) {
	profs, err := parseConfig(strings.NewReader("# comment\n[default]\nurl = http://a:1\n\n[prod]\n url=\"https://b\" \ntoken = k1\n; also a comment\n"))
	if err != nil {
		t.Fatal(err)
	}
	if profs["default"] != (profile{URL: "http://a:1"}) || profs["prod"] != (profile{URL: "https://b", Token: "k1"}) {
		t.Fatalf("profiles: %+v", profs)
	}
	for _, tc := range []struct{ in, want string }{
		{"url = x\n", "line 1: \"url\" is outside a [profile] section"},
		{"[a]\nurl x\n", "line 2: want key = value"},
		{"[a]\nkey = x\n", "line 2: unknown key \"key\""},
		{"[a]\n[a]\n", "line 2: profile [a] appears twice"},
		{"[]\n", "line 1: a section is [name]"},
		{"[a]\nurl = " + strings.Repeat("x", maxConfigBytes) + "\n", "too long"},
	} {
		if _, err := parseConfig(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.30q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// The command line wins over the environment, which wins over the profile,
// which wins over the default; a named profile must exist.
func TestConnPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, []byte("[default]\nurl = http://profile-default\ntoken = tok-default\n[prod]\nurl = http://profile-prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resolve := func(env map[string]string, args ...string) (connFlags, error) {
		t.Helper()
		for _, k := range []string{envURL, envToken, envProfile} {
			t.Setenv(k, env[k])
		}
		t.Setenv(envConfig, cfg)
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var c connFlags
		c.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c, c.resolve()
	}
	for _, tc := range []struct {
		name       string
		env        map[string]string
		args       []string
		url, token string
	}{
		{"profile default", nil, nil, "http://profile-default", "tok-default"},
		{"env over profile", map[string]string{envURL: "http://env"}, nil, "http://env", "tok-default"},
		{"flag over env", map[string]string{envURL: "http://env", envToken: "tok-env"}, []string{"--url", "http://flag"}, "http://flag", "tok-env"},
		{"named profile", nil, []string{"--profile", "prod"}, "http://profile-prod", ""},
		{"empty token flag", map[string]string{envToken: "tok-env"}, []string{"--token", ""}, "http://profile-default", ""},
		{"profile from env", map[string]string{envProfile: "prod"}, nil, "http://profile-prod", ""},
	} {
		c, err := resolve(tc.env, tc.args...)
		if err != nil || c.url != tc.url || c.token != tc.token {
			t.Errorf("%s: url %q token %q err %v; want %q %q", tc.name, c.url, c.token, err, tc.url, tc.token)
		}
	}
	if _, err := resolve(nil, "--profile", "nope"); err == nil || !strings.Contains(err.Error(), "no profile [nope]") {
		t.Errorf("missing profile: %v", err)
	}
	t.Setenv(envConfig, filepath.Join(dir, "missing"))
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var c connFlags
	c.register(fs)
	t.Setenv(envURL, "")
	t.Setenv(envProfile, "")
	if err := c.resolve(); err != nil || c.url != defaultURL {
		t.Errorf("no config file: url %q, err %v", c.url, err)
	}
}

func TestSSEReader(t *testing.T) {
	in := ": stream open\n\nid: c1\nevent: task.progress\ndata: {\"a\":1}\n\n" +
		"event: ignored-without-data\n\n" +
		"data: line1\r\ndata: line2\r\n\r\n" +
		": heartbeat\n" +
		"data: cut by the end"
	r := newSSEReader(strings.NewReader(in))
	var got []sseMessage
	for {
		m, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	want := []sseMessage{
		{Comment: "stream open"},
		{Event: "task.progress", ID: "c1", Data: []byte(`{"a":1}`)},
		{Data: []byte("line1\nline2")},
		{Comment: "heartbeat"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].Event != want[i].Event || got[i].ID != want[i].ID || !bytes.Equal(got[i].Data, want[i].Data) || got[i].Comment != want[i].Comment {
			t.Errorf("message %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	r = newSSEReader(strings.NewReader("data: " + strings.Repeat("x", 100) + "\n\n"))
	r.max = 50
	if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("long line: %v", err)
	}
}

func TestResumeTrackerBoundsSessions(t *testing.T) {
	tr := newResumeTracker(aep.DialectR)
	for i := range maxResumeSessions + 10 {
		seq := int64(i)
		tr.observe(item{}, &eventView{Session: fmt.Sprintf("s%03d", i), Seq: &seq})
	}
	again := int64(99)
	tr.observe(item{}, &eventView{Session: "s010", Seq: &again}) // moves to the end
	name, v := tr.flag()
	if name != "--from" || strings.Count(v, `"session"`) != maxResumeSessions || strings.Contains(v, `"s009"`) ||
		!strings.HasSuffix(v, `{"session":"s010","epoch":0,"seq":99}]`) {
		t.Errorf("flag %s %s", name, v)
	}
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("id: 1\nevent: x\ndata: y\n\n: c\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newSSEReader(bytes.NewReader(b))
		r.max = 1 << 10
		for range 1000 {
			if _, err := r.Next(); err != nil {
				return
			}
		}
	})
}

// A bare host:port is read as http://host:port (it was "first path segment
// in URL cannot contain colon"); other schemes and hostless URLs are
// refused with the reason.
func TestGatewayURLForms(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"127.0.0.1:18080", "http://127.0.0.1:18080", ""},
		{"localhost:8080/", "http://localhost:8080", ""},
		{"https://gw.example.com/base/", "https://gw.example.com/base", ""},
		{"http://[::1]:8080", "http://[::1]:8080", ""},
		{"ftp://x:21", "", "scheme must be http or https"},
		{"http://", "", "no host"},
		{"http://h:1/?a=b", "", "no query"},
	} {
		got, err := gatewayURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("gatewayURL(%q) = %q, %v, want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("gatewayURL(%q) = %q, %v, want %q", c.in, got, err, c.want)
		}
	}
}
