package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// aepctl audit through the binaries (issue 24): an event's audit record
// names who published it (the agent's principal, api_key, http) and its
// delivery status in each durable subscription that matches it:
// acknowledged, dead_lettered (rejected by the consumer) or pending; a
// subscription whose filter does not match is not listed. A principal
// with scopes may not read audit records.
func TestAepctlAudit(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte(keyFileLine("acme", "k-ops")+
		strings.TrimSuffix(keyFileLine("acme", "k-agent"), "\n")+" principal=agent-r scopes=emit:agent:researcher,write:tool\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--data-dir", filepath.Join(dir, "data"), "--embedded-kafka-listen", "127.0.0.1:0", "--api-keys", keys)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := func(key string, args ...string) string {
		return aepctlOK(ctx, t, g, "", append(args, "--token", key)...)
	}
	sub := strings.TrimSpace(as("k-ops", "subscriptions", "create", "--types", "task.*"))
	other := strings.TrimSpace(as("k-ops", "subscriptions", "create", "--types", "memory.*"))
	events := []string{dEvent(0, "s_audit"), strings.Replace(dEvent(1, "s_audit"), `"task.progress"`, `"task.failed"`, 1), dEvent(2, "s_audit")}
	aepctlOK(ctx, t, g, strings.Join(events, "\n")+"\n", "publish", "--token", "k-agent") // exit 0: all accepted
	// The consumer acknowledges the first, rejects the second, stops.
	as("k-ops", "consume", "--subscription", sub, "--ack", "--reject-types", "task.failed", "--count", "2", "--timeout", "60s", "--ack-interval", "100ms", "-o", "ndjson")

	audit := func(id string) map[string]any {
		var rec map[string]any
		for range 50 { // the acks commit asynchronously
			out := as("k-ops", "audit", id, "-o", "json")
			if err := json.Unmarshal([]byte(out), &rec); err != nil {
				t.Fatalf("audit %s: %v: %s", id, err, out)
			}
			if ds, _ := rec["deliveries"].([]any); len(ds) == 1 && ds[0].(map[string]any)["status"] != "pending" || id == "evt_s_audit_0002" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return rec
	}
	want := map[string]string{"evt_s_audit_0000": "acknowledged", "evt_s_audit_0001": "dead_lettered", "evt_s_audit_0002": "pending"}
	for id, status := range want {
		rec := audit(id)
		pub, _ := rec["published"].(map[string]any)
		if pub["principal"] != "agent-r" || pub["auth"] != "api_key" || pub["via"] != "http" {
			t.Errorf("%s published %v", id, pub)
		}
		ev, _ := rec["event"].(map[string]any)
		if ev["id"] != id || ev["source"] != "agent:researcher" || ev["target"] != "tool:crawler" || ev["created_at"] != "2026-07-09T10:00:00Z" {
			t.Errorf("%s event %v", id, ev)
		}
		ds, _ := rec["deliveries"].([]any)
		if len(ds) != 1 {
			t.Errorf("%s deliveries %v: want only %s (not %s, memory.*)", id, ds, sub, other)
			continue
		}
		if d := ds[0].(map[string]any); d["subscription_id"] != sub || d["status"] != status {
			t.Errorf("%s delivery %v, want %s", id, d, status)
		}
	}
	text := as("k-ops", "audit", "evt_s_audit_0001")
	for _, s := range []string{"agent-r (api_key)", "dead_lettered", "task_error", sub} {
		if !strings.Contains(text, s) {
			t.Errorf("the text record lacks %q:\n%s", s, text)
		}
	}
	var errb strings.Builder
	cmd := aepctlCmd(ctx, t, g, "", "audit", "evt_s_audit_0000", "--token", "k-agent")
	cmd.Stderr = &errb
	if err := cmd.Run(); err == nil || !strings.Contains(errb.String(), "tenant-wide") {
		t.Errorf("a principal with scopes read an audit record: %v %s", err, errb.String())
	}
	cmd = aepctlCmd(ctx, t, g, "", "audit", "evt_missing", "--token", "k-ops")
	errb.Reset()
	cmd.Stderr = &errb
	if err := cmd.Run(); err == nil || !strings.Contains(errb.String(), "no event") {
		t.Errorf("a missing event: %v %s", err, errb.String())
	}
}
