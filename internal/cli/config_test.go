package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	profs, err := ParseConfig(strings.NewReader("# comment\n[default]\nurl = http://a:1\n\n[prod]\n url=\"https://b\" \ntoken = k1\n; also a comment\n"))
	if err != nil {
		t.Fatal(err)
	}
	if profs["default"] != (Profile{URL: "http://a:1"}) || profs["prod"] != (Profile{URL: "https://b", Token: "k1"}) {
		t.Fatalf("profiles: %+v", profs)
	}
	for _, tc := range []struct{ in, want string }{
		{"url = x\n", "line 1: \"url\" is outside a [profile] section"},
		{"[a]\nurl x\n", "line 2: want key = value"},
		{"[a]\nkey = x\n", "line 2: unknown key \"key\""},
		{"[a]\n[a]\n", "line 2: profile [a] appears twice"},
		{"[]\n", "line 1: a section is [name]"},
		{"[a]\nurl = " + strings.Repeat("x", MaxConfigBytes) + "\n", "too long"},
	} {
		if _, err := ParseConfig(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
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
	resolve := func(env map[string]string, args ...string) (ConnFlags, error) {
		t.Helper()
		for _, k := range []string{EnvURL, EnvToken, EnvProfile} {
			t.Setenv(k, env[k])
		}
		t.Setenv(EnvConfig, cfg)
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var c ConnFlags
		c.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c, c.Resolve()
	}
	for _, tc := range []struct {
		name       string
		env        map[string]string
		args       []string
		url, token string
	}{
		{"profile default", nil, nil, "http://profile-default", "tok-default"},
		{"env over profile", map[string]string{EnvURL: "http://env"}, nil, "http://env", "tok-default"},
		{"flag over env", map[string]string{EnvURL: "http://env", EnvToken: "tok-env"}, []string{"--url", "http://flag"}, "http://flag", "tok-env"},
		{"named profile", nil, []string{"--profile", "prod"}, "http://profile-prod", ""},
		{"empty token flag", map[string]string{EnvToken: "tok-env"}, []string{"--token", ""}, "http://profile-default", ""},
		{"profile from env", map[string]string{EnvProfile: "prod"}, nil, "http://profile-prod", ""},
	} {
		c, err := resolve(tc.env, tc.args...)
		if err != nil || c.URL != tc.url || c.Token != tc.token {
			t.Errorf("%s: url %q token %q err %v; want %q %q", tc.name, c.URL, c.Token, err, tc.url, tc.token)
		}
	}
	if _, err := resolve(nil, "--profile", "nope"); err == nil || !strings.Contains(err.Error(), "no profile [nope]") {
		t.Errorf("missing profile: %v", err)
	}
	t.Setenv(EnvConfig, filepath.Join(dir, "missing"))
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var c ConnFlags
	c.Register(fs)
	t.Setenv(EnvURL, "")
	t.Setenv(EnvProfile, "")
	if err := c.Resolve(); err != nil || c.URL != DefaultURL {
		t.Errorf("no config file: url %q, err %v", c.URL, err)
	}
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
		got, err := GatewayURL(c.in)
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
