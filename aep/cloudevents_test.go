package aep

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

func jsonLines(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 {
			out = append(out, append([]byte(nil), l...))
		}
	}
	return out
}

// sameJSON compares canonically (AEP-0005 §5.1): member order aside,
// numbers by value (the fixtures were written by a serializer that writes
// 0.0201 for the golden corpus's 0.02010).
func sameJSON(t *testing.T, a, b []byte) bool { return jsonEqual(t, a, b, false) }

// sameBytesJSON is sameJSON with numbers as written: what this mapping,
// which copies values verbatim, keeps.
func sameBytesJSON(t *testing.T, a, b []byte) bool { return jsonEqual(t, a, b, true) }

func jsonEqual(t *testing.T, a, b []byte, exactNumbers bool) bool {
	t.Helper()
	dec := func(x []byte) any {
		d := json.NewDecoder(bytes.NewReader(x))
		if exactNumbers {
			d.UseNumber()
		}
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%v: %s", err, x)
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}

// AEP-0005 §5.1-2: every golden event maps to its pinned CloudEvent, and
// the pinned CloudEvent maps back to the golden event, bit for bit modulo
// member order.
func TestCloudEventsRoundTripFixtures(t *testing.T) {
	golden := jsonLines(t, "testdata/r-golden.jsonl")
	ces := jsonLines(t, "testdata/r-ce-expected.jsonl")
	if len(golden) != len(ces) || len(golden) < 60 {
		t.Fatalf("%d golden events, %d CloudEvents", len(golden), len(ces))
	}
	for i := range golden {
		if _, err := Parse(golden[i], Limits{}); err != nil {
			t.Fatalf("golden %d does not parse: %v", i, err)
		}
		ce, err := ToCloudEvent(golden[i])
		if err != nil {
			t.Fatalf("golden %d: %v", i, err)
		}
		if !sameJSON(t, ce, ces[i]) {
			t.Errorf("golden %d forward:\n got %s\nwant %s", i, ce, ces[i])
		}
		back, dropped, err := FromCloudEvent(ces[i])
		if err != nil || len(dropped) > 0 {
			t.Fatalf("ce %d: %v, dropped %v", i, err, dropped)
		}
		if !sameJSON(t, back, golden[i]) {
			t.Errorf("ce %d inverse:\n got %s\nwant %s", i, back, golden[i])
		}
		if !json.Valid(ce) {
			t.Errorf("golden %d: the CloudEvent is not JSON", i)
		}
		// and this mapping's own round trip keeps every value's bytes
		again, _, err := FromCloudEvent(ce)
		if err != nil || !sameBytesJSON(t, again, golden[i]) {
			t.Errorf("golden %d: forward then inverse is not the event byte for byte: %v\n%s", i, err, again)
		}
	}
}

// AEP-0005 §5.5: the inbound preserve-path cases.
func TestCloudEventsInboundFixtures(t *testing.T) {
	b, err := os.ReadFile("testdata/r-ce-inbound-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Name     string          `json:"name"`
			CE       json.RawMessage `json:"ce"`
			Expected json.RawMessage `json:"expected"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Cases) != 3 {
		t.Fatalf("%v, %d cases", err, len(doc.Cases))
	}
	for _, c := range doc.Cases {
		got, dropped, err := FromCloudEvent(c.CE)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !sameJSON(t, got, c.Expected) {
			t.Errorf("%s:\n got %s\nwant %s", c.Name, got, c.Expected)
		}
		if _, err := Parse(got, Limits{}); err != nil {
			t.Errorf("%s: the mapped event does not validate: %v", c.Name, err)
		}
		if c.Name == "grammar-illegal name dropped, the rest maps" && !reflect.DeepEqual(dropped, []string{"aep_bad"}) {
			t.Errorf("%s: dropped %v", c.Name, dropped)
		}
	}
}

// Out of scope or malformed CloudEvents get a precise error.
func TestCloudEventsRefused(t *testing.T) {
	for name, c := range map[string]struct {
		ce   string
		want error
	}{
		"foreign type":      {`{"specversion":"1.0","id":"1","source":"s","type":"com.example.order"}`, ErrForeignCloudEvent},
		"root alone":        {`{"specversion":"1.0","id":"1","source":"s","type":"dev.aep."}`, ErrForeignCloudEvent},
		"specversion 0.3":   {`{"specversion":"0.3","id":"1","source":"s","type":"dev.aep.run.started"}`, ErrNotCloudEvent},
		"no specversion":    {`{"id":"1","source":"s","type":"dev.aep.run.started"}`, ErrNotCloudEvent},
		"binary data":       {`{"specversion":"1.0","id":"1","source":"s","type":"dev.aep.run.started","data_base64":"AA=="}`, ErrNotCloudEvent},
		"xml content type":  {`{"specversion":"1.0","id":"1","source":"s","type":"dev.aep.run.started","datacontenttype":"application/xml","data":"<a/>"}`, ErrNotCloudEvent},
		"not an object":     {`[1]`, ErrNotCloudEvent},
		"type not a string": {`{"specversion":"1.0","id":"1","source":"s","type":7}`, ErrNotCloudEvent},
	} {
		if _, _, err := FromCloudEvent([]byte(c.ce)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// a CloudEvents extension named like a core AEP attribute cannot ride
	// as an extension: dropped, not promoted
	_, dropped, err := FromCloudEvent([]byte(`{"specversion":"1.0","id":"1","source":"s","type":"dev.aep.run.started","agent":"spoof","aepagentid":"a"}`))
	if err != nil || !reflect.DeepEqual(dropped, []string{"agent"}) {
		t.Errorf("core-named extension: %v, dropped %v", err, dropped)
	}
}

// BenchmarkToCloudEvent is the bridge's mapping of one event (the tool
// call of the golden corpus, ~600 bytes).
func BenchmarkToCloudEvent(b *testing.B) {
	raw := []byte(`{"aep":"0.1","id":"01JX9YB3P4T90000000000GOLD","type":"tool.completed","time":"2026-07-03T10:15:04.221Z","source":"aep://host-a/agent/claude-code/session/s_8f2c","agent":"claude-code","session":"s_8f2c","run":"r_0042","step":"turn-3","seq":3,"epoch":0,"cause":"01JX9YB2Z1QK0000000000GOLD","subject":"Bash","severity":"info","capture":"metadata","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","data":{"tool":{"name":"Bash","call_id":"t_91"},"status":"success","duration_ms":1240,"gen_ai.usage.input_tokens":142,"gen_ai.usage.output_tokens":87}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := ToCloudEvent(raw); err != nil {
			b.Fatal(err)
		}
	}
}
