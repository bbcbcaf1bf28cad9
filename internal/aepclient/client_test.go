package aepclient

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestDecodeResult(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		n      int
		want   Result
	}{
		{"R accepted", 202, `{"accepted":2,"topic":"aep.default.events","positions":[{"index":0,"line":1,"partition":3,"offset":41}]}`, 2,
			Result{Status: 202, Accepted: 2, Topic: "aep.default.events"}},
		{"R invalid", 400, `{"error":"invalid-event","detail":"line 3: bad seq","field":"seq","line":3,"index":1,"invalid":2}`, 4,
			Result{Status: 400, Rejected: 4, Code: "invalid-event", Detail: "line 3: bad seq", Invalid: 2,
				Errors: []EventError{{Index: 1, Code: "invalid-event", Field: "seq", Message: "line 3: bad seq"}}}},
		{"R body limit", 413, `{"error":"limit-exceeded","detail":"body too large"}`, 3,
			Result{Status: 413, Rejected: 3, Code: "limit-exceeded", Detail: "body too large"}},
		{"R version", 426, `{"versions":["0.1"]}`, 1,
			Result{Status: 426, Rejected: 1, Code: "version", Detail: "the gateway supports AEP versions 0.1"}},
		{"R partial 503", 503, `{"error":"unavailable","detail":"retry","accepted":1,"failed":[{"index":1,"line":2,"partition":-1,"offset":-1}],"positions":[]}`, 2,
			Result{Status: 503, Accepted: 1, Rejected: 1, Code: "unavailable", Detail: "retry", Retryable: true,
				Errors: []EventError{{Index: 1, Code: "unavailable", Message: "retry", Retryable: true}}}},
		{"D mixed", 202, `{"accepted":2,"rejected":1,"errors":[{"event_index":1,"error":{"code":"invalid_event_type","message":"bad","retryable":false,"details":{"field":"type"}}}],"topic":"t","positions":[]}`, 3,
			Result{Status: 202, Accepted: 2, Rejected: 1, Topic: "t",
				Errors: []EventError{{Index: 1, Code: "invalid_event_type", Field: "type", Message: "bad"}}}},
		{"D whole refusal", 415, `{"error":{"code":"protocol_error","message":"content type","retryable":false}}`, 5,
			Result{Status: 415, Rejected: 5, Code: "protocol_error", Detail: "content type"}},
		{"not JSON", 502, `<html>bad gateway</html>`, 2,
			Result{Status: 502, Rejected: 2, Retryable: true, Code: "bad-response", Detail: `HTTP 502, body not JSON: "<html>bad gateway</html>"`}},
		{"unknown JSON error", 500, `{}`, 2,
			Result{Status: 500, Rejected: 2, Retryable: true, Code: "http-500", Detail: `{}`}},
		{"R rate limited", 429, `{"error":"limit-exceeded","detail":"retry after 1s"}`, 2,
			Result{Status: 429, Rejected: 2, Retryable: true, Code: "limit-exceeded", Detail: "retry after 1s"}},
		{"D rate limited", 429, `{"error":{"code":"protocol_error","message":"retry after 1s","retryable":true}}`, 2,
			Result{Status: 429, Rejected: 2, Retryable: true, Code: "protocol_error", Detail: "retry after 1s"}},
		{"D over burst", 429, `{"error":{"code":"protocol_error","message":"send smaller batches","retryable":false}}`, 2,
			Result{Status: 429, Rejected: 2, Code: "protocol_error", Detail: "send smaller batches"}},
		{"D invalid is not retryable", 400, `{"error":{"code":"invalid_envelope","message":"x","retryable":true}}`, 1,
			Result{Status: 400, Rejected: 1, Code: "invalid_envelope", Detail: "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DecodeResult(tc.status, []byte(tc.body), tc.n); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{Attempts: 5, Base: 100 * time.Millisecond, Max: time.Second}
	tests := []struct {
		n          int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 80 * time.Millisecond, 120 * time.Millisecond},
		{2, 0, 160 * time.Millisecond, 240 * time.Millisecond},
		{10, 0, 800 * time.Millisecond, 1200 * time.Millisecond},
		{1, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond},
		{1, time.Minute, time.Second, time.Second},
	}
	for _, tc := range tests {
		for range 20 {
			w := p.Waits()
			for range tc.n - 1 {
				w.Next(0)
			}
			if d := w.Next(tc.retryAfter); d < tc.lo || d > tc.hi {
				t.Fatalf("wait %d (Retry-After %v) = %v, want in [%v, %v]", tc.n, tc.retryAfter, d, tc.lo, tc.hi)
			}
		}
	}
}

// FuzzDecodeResult: any answer from a server decodes without panicking and
// never counts more events rejected than were sent, or fewer than none.
func FuzzDecodeResult(f *testing.F) {
	f.Add(202, []byte(`{"accepted":2,"topic":"x"}`), 2)
	f.Add(400, []byte(`{"error":"invalid-event","index":-5}`), 1)
	f.Add(202, []byte(`{"accepted":1,"rejected":1,"errors":[{"event_index":9,"error":{"code":"x"}}]}`), 2)
	f.Add(415, []byte(`{"error":{"code":"protocol_error"}}`), 1)
	f.Add(426, []byte(`{"versions":[]}`), 1)
	f.Add(503, []byte(`{"error":"unavailable","accepted":7}`), 3)
	f.Fuzz(func(t *testing.T, status int, body []byte, n int) {
		r := DecodeResult(status, body, n)
		if r.Accepted < 0 || r.Rejected < 0 || r.Accepted+r.Rejected > max(n, 0) {
			t.Fatalf("n %d: accepted %d rejected %d", n, r.Accepted, r.Rejected)
		}
	})
}

// The 202 fast path reads what encoding/json reads, and leaves every other
// shape to it.
func TestDecodeAcceptedMatchesJSON(t *testing.T) {
	fast := map[string]string{
		"R":         `{"accepted":2,"topic":"aep.default.events","positions":[{"index":0,"line":1,"partition":3,"offset":7},{"index":1,"line":2,"partition":0,"offset":9,"reused_offset":true}]}` + "\n",
		"D":         `{"accepted":1,"rejected":0,"errors":[],"topic":"aep.t.events","positions":[{"event_index":0,"id":"evt_1","partition":2,"offset":5}]}` + "\n",
		"R no nl":   `{"accepted":1,"topic":"t","positions":[{"index":0,"line":1,"partition":0,"offset":0}]}`,
		"R emptyps": `{"accepted":0,"topic":"t","positions":[]}`,
	}
	for name, body := range fast {
		got, ok := DecodeAccepted([]byte(body))
		if !ok {
			t.Errorf("%s: fast path refused %s", name, body)
			continue
		}
		var w WireResult
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			t.Fatal(err)
		}
		if got.Accepted != *w.Accepted || got.Topic != w.Topic || got.Rejected != 0 || got.Status != http.StatusAccepted {
			t.Errorf("%s: fast %+v, encoding/json accepted %d topic %q", name, got, *w.Accepted, w.Topic)
		}
		if slow := DecodeResult(http.StatusAccepted, []byte(body), got.Accepted); slow.Accepted != got.Accepted || slow.Topic != got.Topic || slow.Rejected != 0 {
			t.Errorf("%s: DecodeResult %+v, fast %+v", name, slow, got)
		}
	}
	slow := map[string]string{
		"D with errors": `{"accepted":1,"rejected":1,"errors":[{"event_index":0,"error":{"code":"invalid_envelope","message":"m","retryable":false}}],"topic":"t","positions":[{"event_index":1,"id":"e","partition":0,"offset":0}]}`,
		"escaped topic": `{"accepted":1,"topic":"a\"b","positions":[{"index":0,"line":1,"partition":0,"offset":0}]}`,
		"truncated":     `{"accepted":1,"topic":"t","positions":[{"index":0`,
		"other order":   `{"topic":"t","accepted":1,"positions":[]}`,
		"huge count":    `{"accepted":123456789012,"topic":"t","positions":[]}`,
	}
	for name, body := range slow {
		if res, ok := DecodeAccepted([]byte(body)); ok {
			t.Errorf("%s: fast path took %s as %+v", name, body, res)
		}
	}
	if res := DecodeResult(http.StatusAccepted, []byte(slow["D with errors"]), 2); res.Accepted != 1 || res.Rejected != 1 || len(res.Errors) != 1 {
		t.Errorf("D with errors through encoding/json: %+v", res)
	}
}
