package dialectd

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestAppendData(t *testing.T) {
	const tail = `"delivery":{"mode":"best_effort","sequence":7,"cursor":"c1"}}`
	for _, tc := range []struct{ name, in, want string }{
		{"plain", `{"id":"e","type":"x"}`, `{"id":"e","type":"x",` + tail},
		{"trailing space", "{\"id\":\"e\"}\n", `{"id":"e",` + tail},
		{"pretty", "{\n  \"id\": \"e\"\r\n}", `{   "id": "e"  ,` + tail},
		{"empty", `{}`, `{` + tail},
		{"replaces first", `{"delivery":{"mode":"x"},"id":"e"}`, `{"id":"e",` + tail},
		{"replaces middle", `{"a":1, "delivery":[1,"}"] ,"b":2}`, `{"a":1, "b":2,` + tail},
		{"replaces last", `{"a":"d\"}","delivery":{"s":"{"}}`, `{"a":"d\"}",` + tail},
		{"replaces only", `{ "delivery" : null }`, `{  ` + tail},
		{"nested not replaced", `{"p":{"delivery":1}}`, `{"p":{"delivery":1},` + tail},
	} {
		got, ok := appendData([]byte("x"), []byte(tc.in), "best_effort", 7, "c1")
		if !ok || string(got) != "x"+tc.want {
			t.Errorf("%s: got %q (ok %v), want %q", tc.name, got, ok, "x"+tc.want)
		}
	}
	for _, bad := range []string{``, `[]`, `"s"`, `{"a":1`, ` `} {
		if got, ok := appendData([]byte("x"), []byte(bad), "m", 1, "c"); ok || string(got) != "x" {
			t.Errorf("%q: got %q ok %v, want refusal", bad, got, ok)
		}
	}
}

// FuzzAppendData: for every JSON object, the result is one line of valid
// JSON holding the input's members except delivery, plus ours.
func FuzzAppendData(f *testing.F) {
	for _, s := range []string{`{"id":"e"}`, `{"delivery":1,"a":[{"delivery":2}]}`, "{\n\"a\":\"\\\"\"\n}", `{}`, `{"a":"\u0064"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(in, &m) != nil || m == nil || !json.Valid(in) {
			return
		}
		if bytes.Contains(in, []byte(`\u`)) || bytes.Contains(in, []byte(`"delivery"`)) != hasDeliveryKey(m) {
			return // an escaped or duplicated name: compared as written, out of scope
		}
		out, ok := appendData(nil, in, "replayable", 3, "cur")
		if !ok {
			t.Fatalf("refused a JSON object %q", in)
		}
		if bytes.ContainsAny(out, "\r\n") {
			t.Fatalf("line break in %q", out)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("invalid JSON %q from %q: %v", out, in, err)
		}
		var d struct {
			Mode     string `json:"mode"`
			Sequence uint64 `json:"sequence"`
			Cursor   string `json:"cursor"`
		}
		if err := json.Unmarshal(got["delivery"], &d); err != nil || d.Mode != "replayable" || d.Sequence != 3 || d.Cursor != "cur" {
			t.Fatalf("delivery member %s", got["delivery"])
		}
		delete(got, "delivery")
		delete(m, "delivery")
		if len(got) != len(m) {
			t.Fatalf("members changed: %q -> %q", in, out)
		}
		for k, v := range m {
			var a, b any
			_ = json.Unmarshal(v, &a)
			_ = json.Unmarshal(got[k], &b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("member %q changed: %s -> %s", k, v, got[k])
			}
		}
	})
}

func hasDeliveryKey(m map[string]json.RawMessage) bool { _, ok := m["delivery"]; return ok }
