package aep

import (
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"testing"
)

func readPins(t *testing.T, path string) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pins map[string]json.RawMessage
	if err := json.Unmarshal(b, &pins); err != nil {
		t.Fatal(err)
	}
	return pins
}

// AEP-0005 §5.3: the pinned OTLP LogRecords of golden events, exactly
// (severity, gen_ai.* hoisting, traceparent, the payload dropped above the
// default ceiling).
func TestOTLPProjectionPins(t *testing.T) {
	golden := jsonLines(t, "testdata/r-golden.jsonl")
	pins := readPins(t, "testdata/r-otlp-expected.json")
	if len(pins) < 4 {
		t.Fatalf("%d pins", len(pins))
	}
	for k, want := range pins {
		i, _ := strconv.Atoi(k)
		rec, err := ToOTLPLog(golden[i], CaptureMetadata)
		if err != nil {
			t.Fatalf("golden %d: %v", i, err)
		}
		got, _ := json.Marshal(rec)
		if !sameBytesJSON(t, got, want) {
			t.Errorf("golden %d:\n got %s\nwant %s", i, got, want)
		}
	}
	// every golden event projects; every severity maps to its row
	for i, g := range golden {
		if _, err := ToOTLPLog(g, CaptureFull); err != nil {
			t.Errorf("golden %d: %v", i, err)
		}
	}
}

// AEP-0005 §5.6: the pinned OCSF records, checked also against the pinned
// class subset (only class attributes, enum-legal ids, derived type_uid);
// the answered resolution carries no disposition; other families give no
// record.
func TestOCSFProjectionPins(t *testing.T) {
	golden := jsonLines(t, "testdata/r-golden.jsonl")
	pins := readPins(t, "testdata/r-ocsf-expected.json")
	var classes struct {
		Version string `json:"version"`
		Classes map[string]struct {
			CategoryUID int                        `json:"category_uid"`
			Attributes  []string                   `json:"attributes"`
			Activity    map[string]json.RawMessage `json:"activity"`
			Status      map[string]json.RawMessage `json:"status"`
			Disposition map[string]json.RawMessage `json:"disposition"`
			Severity    map[string]json.RawMessage `json:"severity"`
		} `json:"classes"`
	}
	b, err := os.ReadFile("testdata/r-ocsf-classes.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &classes); err != nil || classes.Version != OCSFVersion {
		t.Fatalf("%v, version %q", err, classes.Version)
	}
	if len(pins) < 8 {
		t.Fatalf("%d pins", len(pins))
	}
	for k, want := range pins {
		i, _ := strconv.Atoi(k)
		rec, err := ToOCSF(golden[i], CaptureMetadata)
		if err != nil || rec == nil {
			t.Fatalf("golden %d: %v %v", i, rec, err)
		}
		got, _ := json.Marshal(rec)
		if !sameBytesJSON(t, got, want) {
			t.Errorf("golden %d:\n got %s\nwant %s", i, got, want)
		}
		cls := classes.Classes[strconv.Itoa(rec["class_uid"].(int))]
		allowed := map[string]bool{}
		for _, a := range cls.Attributes {
			allowed[a] = true
		}
		for a := range rec {
			if !allowed[a] {
				t.Errorf("golden %d: %s is not an attribute of class %d", i, a, rec["class_uid"])
			}
		}
		has := func(m map[string]json.RawMessage, key string) bool {
			v, ok := rec[key]
			if !ok {
				return true
			}
			_, legal := m[strconv.Itoa(v.(int))]
			return legal
		}
		if rec["category_uid"] != cls.CategoryUID || !has(cls.Activity, "activity_id") || !has(cls.Status, "status_id") ||
			!has(cls.Disposition, "disposition_id") || !has(cls.Severity, "severity_id") ||
			rec["type_uid"] != rec["class_uid"].(int)*100+rec["activity_id"].(int) {
			t.Errorf("golden %d: ids not enum-legal or type_uid not derived: %s", i, got)
		}
	}
	if rec, _ := ToOCSF(golden[9], CaptureMetadata); rec == nil || rec["disposition_id"] != nil {
		t.Errorf("attention.resolved answered: %v, want a record without disposition", rec)
	}
	for _, i := range []int{5, 25} {
		if rec, err := ToOCSF(golden[i], CaptureMetadata); rec != nil || err != nil {
			t.Errorf("golden %d (%s) projected: %v %v", i, golden[i][:80], rec, err)
		}
	}
	// a dismissed resolution is No Action, and declares its profile
	dismissed := []byte(`{"aep":"0.1","id":"01JX9YB9RSV00000000000XXXX","type":"attention.resolved","time":"2026-07-03T10:15:09.250Z","source":"aep://h/agent/a","agent":"a","subject":"01JX9YB4RQ000000000000GOLD","data":{"resolution":"dismissed"}}`)
	rec, err := ToOCSF(dismissed, CaptureMetadata)
	if err != nil || rec["disposition_id"] != 16 || !reflect.DeepEqual(rec["metadata"].(map[string]any)["profiles"], []string{"security_control"}) {
		t.Errorf("dismissed: %v %v", rec, err)
	}
}
