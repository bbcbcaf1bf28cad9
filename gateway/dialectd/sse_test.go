package dialectd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/dialectd"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// sseEnv is a gateway (real ingest over HTTP into kfake) with the D SSE
// handler served next to it on the same test server.
type sseEnv struct {
	t     *testing.T
	url   string
	kr    *cursor.Keyring
	adm   *kadm.Client
	reg   *prometheus.Registry // the engine's metrics
	seeds kgo.Opt
}

func newSSEEnv(t *testing.T, cfg dialectd.SSEConfig) *sseEnv {
	t.Helper()
	st := gatewaytest.New(t, gatewaytest.Options{})
	reg := prometheus.NewRegistry()
	eng, err := engine.NewEngine(engine.Config{ClientOpts: []kgo.Opt{st.Seeds, kgo.FetchMaxWait(200 * time.Millisecond)}, Topics: st.Provisioner, Registerer: reg, Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /aep/events", gatewaytest.WithTenant(gateway.DevTenant, dialectd.NewSSEHandler(eng, st.Keyring, cfg)))
	mux.Handle("/", st.Server.Handler())
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		eng.Close()
	})
	return &sseEnv{t: t, url: hs.URL, kr: st.Keyring, adm: st.Admin, reg: reg, seeds: st.Seeds}
}

func dEvent(id, typ, session string) string {
	return fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":%q,"source":"agent:researcher","session_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{"n":%q}}`, id, typ, session, id)
}

func (e *sseEnv) ingest(events ...string) {
	e.t.Helper()
	resp, err := http.Post(e.url+"/aep/events", "application/x-ndjson", strings.NewReader(strings.Join(events, "\n")+"\n"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted || !bytes.Contains(b, []byte(fmt.Sprintf(`"accepted":%d`, len(events)))) {
		e.t.Fatalf("ingest: %d %s", resp.StatusCode, b)
	}
}

// sseStream is a dialect D event stream; next skips heartbeats.
type sseStream struct {
	*gatewaytest.SSEStream
	t *testing.T
}

// open starts a stream; it returns the response for a non-200 status.
func (e *sseEnv) open(query string, hdr map[string]string) (*sseStream, *http.Response) {
	e.t.Helper()
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	return e.openURL(e.url+"/aep/events?"+query, h)
}

// openURL opens a stream at u and reads its stream-open comment; it
// returns the response for a non-200 status.
func (e *sseEnv) openURL(u string, h http.Header) (*sseStream, *http.Response) {
	e.t.Helper()
	gs, resp := gatewaytest.OpenSSE(e.t, u, gatewaytest.SSEOptions{Header: h, Buffer: 1024})
	if gs == nil {
		return nil, resp
	}
	s := &sseStream{gs, e.t}
	if m := s.next(); m.Comment() != "stream open" {
		e.t.Fatalf("first message %+v", m)
	}
	return s, resp
}

// next returns the next message, skipping heartbeats.
func (s *sseStream) next() gatewaytest.SSEMessage {
	return s.NextSkipping("heartbeat")
}

type delivered struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Session  string `json:"session_id"`
	Delivery struct {
		Mode     string `json:"mode"`
		Sequence uint64 `json:"sequence"`
		Cursor   string `json:"cursor"`
	} `json:"delivery"`
	Payload struct {
		N              string `json:"n"`
		FromCursor     string `json:"from_cursor"`
		ToCursor       string `json:"to_cursor"`
		EventsReplayed int    `json:"events_replayed"`
	} `json:"payload"`
}

// event reads the next message as an event and checks the SSE framing
// against the data.
func (s *sseStream) event() delivered {
	tb := s.t
	tb.Helper()
	m := s.next()
	var d delivered
	if err := json.Unmarshal([]byte(m.Data), &d); err != nil {
		tb.Fatalf("data is not JSON: %v: %q", err, m.Data)
	}
	if m.Event != d.Type {
		tb.Fatalf("event: %q but type %q", m.Event, d.Type)
	}
	if d.Type != "event.replayed" && m.ID != d.Delivery.Cursor {
		tb.Fatalf("id %q differs from dialectd.cursor %q", m.ID, d.Delivery.Cursor)
	}
	return d
}

func TestSSEDLiveFiltersAndOrder(t *testing.T) {
	e := newSSEEnv(t, dialectd.SSEConfig{})
	s, _ := e.open("types=task.*&session_id=s1", nil)
	e.ingest(dEvent("evt_1", "task.progress", "s1"), dEvent("evt_2", "task.progress", "s2"),
		dEvent("evt_3", "message.sent", "s1"), dEvent("evt_4", "task.completed", "s1"))
	e.ingest(dEvent("evt_5", "task.progress", "s1"))
	for i, want := range []string{"evt_1", "evt_4", "evt_5"} {
		d := s.event()
		if d.ID != want || d.Payload.N != want || d.Delivery.Mode != "best_effort" || d.Delivery.Sequence != uint64(i+1) {
			t.Fatalf("delivery %d: %+v, want %s with sequence %d", i, d, want, i+1)
		}
	}
	if m, err := s.TryNext(50 * time.Millisecond); errors.Is(err, gatewaytest.ErrEnded) || err == nil && m.Comment() == "" {
		t.Fatalf("unexpected message %+v: %v", m, err)
	}
}

func TestSSEDReplayFromMidCursorThenLive(t *testing.T) {
	t.Run("from_cursor", func(t *testing.T) { testReplay(t, false) })
	t.Run("Last-Event-ID", func(t *testing.T) { testReplay(t, true) })
}

func testReplay(t *testing.T, viaHeader bool) {
	e := newSSEEnv(t, dialectd.SSEConfig{})
	sessions := []string{"sa", "sb", "sc"}
	var evs []string
	for i := range 9 {
		evs = append(evs, dEvent(fmt.Sprintf("evt_%02d", i), "task.progress", sessions[i%3]))
	}
	first, _ := e.open("types=task.*&delivery_mode=replayable", nil)
	e.ingest(evs[:6]...)
	var mid string
	for i := range 6 {
		d := first.event()
		if d.Delivery.Mode != "replayable" || d.Delivery.Sequence != uint64(i+1) {
			t.Fatalf("first stream delivery %d: %+v", i, d)
		}
		if i == 2 {
			mid = d.Delivery.Cursor
		}
	}
	first.Close()
	e.ingest(evs[6:]...)

	var s *sseStream
	if viaHeader {
		s, _ = e.open("types=task.*&delivery_mode=replayable", map[string]string{"Last-Event-ID": mid})
	} else {
		s, _ = e.open("types=task.*&delivery_mode=replayable&from_cursor="+mid, nil)
	}
	// The first stream saw 3 events up to mid; the replay is the other 3 of
	// the first batch and all of the second, each once, in session order.
	var got []string
	last := map[string]string{}
	for i := range 6 {
		d := s.event()
		if d.Delivery.Sequence != uint64(4+i) {
			t.Fatalf("replayed delivery %d has sequence %d", i, d.Delivery.Sequence)
		}
		if prev := last[d.Session]; prev >= d.ID {
			t.Fatalf("session %s: %s after %s", d.Session, d.ID, prev)
		}
		last[d.Session] = d.ID
		got = append(got, d.ID)
	}
	want := map[string]bool{}
	for i := range 9 {
		want[fmt.Sprintf("evt_%02d", i)] = true
	}
	for _, id := range got {
		delete(want, id)
	}
	if len(want) != 3 {
		t.Fatalf("replayed %v; left %v", got, want)
	}
	r := s.event()
	if r.Type != "event.replayed" || r.Payload.FromCursor != mid || r.Payload.EventsReplayed != 6 || r.Payload.ToCursor == "" {
		t.Fatalf("after the replay: %+v", r)
	}
	e.ingest(dEvent("evt_live", "task.progress", "sa"))
	d := s.event()
	if d.ID != "evt_live" || d.Delivery.Sequence != 10 {
		t.Fatalf("live after replay: %+v", d)
	}
	// Resuming from the end of the replay gives exactly what came after.
	s2, _ := e.open("types=task.*&delivery_mode=replayable&from_cursor="+r.Payload.ToCursor, nil)
	if d2 := s2.event(); d2.ID != d.ID || d2.Delivery.Sequence != 10 {
		t.Fatalf("resume from to_cursor: %+v", d2)
	}
	if r2 := s2.event(); r2.Type != "event.replayed" || r2.Payload.EventsReplayed != 1 {
		t.Fatalf("after the second replay: %+v", r2)
	}
}

func TestSSEDRejects(t *testing.T) {
	e := newSSEEnv(t, dialectd.SSEConfig{})
	c := cursor.Cursor{Partitions: 1, Offsets: []cursor.PartitionOffset{{Partition: 0, Offset: 0}}}
	other, err := e.kr.Encode("other", c)
	if err != nil {
		t.Fatal(err)
	}
	wrongKey, err := cursor.NewKeyring(cursor.Key{ID: 1, Secret: []byte("not the server's secret")})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := wrongKey.Encode(gateway.DevTenant, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, query, lastEventID, detail string
	}{
		{"no filter", "", "", ""},
		{"forged cursor", "types=*&from_cursor=" + forged, "", "invalid_cursor"},
		{"foreign cursor", "types=*&delivery_mode=replayable&from_cursor=" + other, "", "cursor_tenant_mismatch"},
		{"forged Last-Event-ID", "types=*", forged, "invalid_cursor"},
		{"garbage Last-Event-ID", "types=*", "garbage!", "invalid_cursor"},
		{"at_least_once", "types=*&delivery_mode=at_least_once", "", ""},
		{"best_effort replay", "types=*&delivery_mode=best_effort&from_cursor=x", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.lastEventID != "" {
				hdr["Last-Event-ID"] = tc.lastEventID
			}
			s, resp := e.open(tc.query, hdr)
			if s != nil {
				t.Fatal("stream opened")
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Code      string            `json:"code"`
					Retryable bool              `json:"retryable"`
					Details   map[string]string `json:"details"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest || body.Error.Code != "subscription_rejected" || body.Error.Retryable {
				t.Fatalf("%d %+v", resp.StatusCode, body)
			}
			if tc.detail != "" && body.Error.Details["cursor_error"] != tc.detail {
				t.Fatalf("details %v, want cursor_error %s", body.Error.Details, tc.detail)
			}
		})
	}
}

func TestSSEDHeartbeat(t *testing.T) {
	e := newSSEEnv(t, dialectd.SSEConfig{Heartbeat: 20 * time.Millisecond})
	s, resp := e.open("types=*", nil)
	if got := resp.Header.Get("X-Accel-Buffering"); got != "no" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", resp.Header)
	}
	s.Until("a heartbeat", func(m gatewaytest.SSEMessage) bool { return m.Comment() == "heartbeat" })
}

func (e *sseEnv) tryIngest(events ...string) error {
	resp, err := http.Post(e.url+"/aep/events", "application/x-ndjson", strings.NewReader(strings.Join(events, "\n")+"\n"))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("ingest: %d %s", resp.StatusCode, b)
	}
	return nil
}

// TestSSEDReplaySeamUnderConcurrentIngest resumes from a mid-stream cursor
// while events keep arriving, so the handover happens with the tail moving:
// every event after the cursor arrives exactly once, in session order, with
// contiguous sequences, and one event.replayed sits somewhere in between.
func TestSSEDReplaySeamUnderConcurrentIngest(t *testing.T) {
	const before, during = 10, 40
	e := newSSEEnv(t, dialectd.SSEConfig{})
	ev := func(i int) string {
		return dEvent(fmt.Sprintf("evt_%03d", i), "task.progress", fmt.Sprintf("s%d", i%4))
	}
	first, _ := e.open("types=task.*&delivery_mode=replayable", nil)
	for i := range before {
		e.ingest(ev(i))
	}
	// The cursor after the fifth event received covers exactly the first
	// five received: per partition they are a prefix, but across
	// partitions the tail may deliver in another order than ingest.
	var mid string
	covered := map[string]bool{}
	for i := range before {
		d := first.event()
		if i < 5 {
			covered[d.ID] = true
		}
		if i == 4 {
			mid = d.Delivery.Cursor
		}
	}
	errs := make(chan error, 1)
	go func() {
		for i := before; i < before+during; i++ {
			if err := e.tryIngest(ev(i)); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	s, _ := e.open("types=task.*&delivery_mode=replayable&from_cursor="+mid, nil)
	want := before + during - 5
	seen := map[string]bool{}
	last := map[string]string{}
	seq := uint64(5)
	replayed := 0
	for len(seen) < want {
		d := s.event()
		if d.Type == "event.replayed" {
			replayed++
			continue
		}
		seq++
		if d.Delivery.Sequence != seq {
			t.Fatalf("sequence %d, want %d", d.Delivery.Sequence, seq)
		}
		if seen[d.ID] {
			t.Fatalf("duplicate %s", d.ID)
		}
		if covered[d.ID] {
			t.Fatalf("%s is before the cursor", d.ID)
		}
		if prev := last[d.Session]; prev >= d.ID {
			t.Fatalf("session %s: %s after %s", d.Session, d.ID, prev)
		}
		seen[d.ID], last[d.Session] = true, d.ID
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	e.ingest(dEvent("evt_zzz", "task.progress", "s0"))
	for {
		d := s.event()
		if d.Type == "event.replayed" {
			replayed++
			continue
		}
		if d.ID != "evt_zzz" || d.Delivery.Sequence != seq+1 {
			t.Fatalf("after the burst: %+v, want evt_zzz with sequence %d", d, seq+1)
		}
		break
	}
	if replayed != 1 {
		t.Fatalf("%d event.replayed messages, want 1", replayed)
	}
}

// TestSSEDRetentionGapIsTold resumes from a cursor whose events retention
// has deleted: the replay restarts at the log start and event.replayed
// names the gap.
func TestSSEDRetentionGapIsTold(t *testing.T) {
	e := newSSEEnv(t, dialectd.SSEConfig{})
	first, _ := e.open("types=task.*&delivery_mode=replayable", nil)
	for i := range 6 {
		e.ingest(dEvent(fmt.Sprintf("evt_%d", i), "task.progress", "s0"))
	}
	var cur string
	for i := range 6 {
		if d := first.event(); i == 0 {
			cur = d.Delivery.Cursor
		}
	}
	ctx := context.Background()
	topic := partitioning.Naming{}.Events(gateway.DevTenant)
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	del := kadm.Offsets{}
	gapPart := int32(-1)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset == 6 {
			del.Add(kadm.Offset{Topic: topic, Partition: o.Partition, At: 4})
			gapPart = o.Partition
		}
	})
	if gapPart < 0 {
		t.Fatalf("no partition holds the 6 events: %v", ends)
	}
	if _, err := e.adm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	s, _ := e.open("types=task.*&delivery_mode=replayable&from_cursor="+cur, nil)
	for _, want := range []string{"evt_4", "evt_5"} {
		if d := s.event(); d.ID != want {
			t.Fatalf("got %s, want %s", d.ID, want)
		}
	}
	m := s.next()
	var r struct {
		Payload struct {
			EventsReplayed int `json:"events_replayed"`
			Gaps           []struct {
				Partition int32  `json:"partition"`
				Requested int64  `json:"requested"`
				RestartAt int64  `json:"restart_at"`
				Reason    string `json:"reason"`
			} `json:"gaps"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(m.Data), &r); err != nil || m.Event != "event.replayed" {
		t.Fatalf("%+v: %v", m, err)
	}
	g := r.Payload.Gaps
	if r.Payload.EventsReplayed != 2 || len(g) != 1 || g[0].Partition != gapPart || g[0].Requested != 1 || g[0].RestartAt != 4 || g[0].Reason != "retention" {
		t.Fatalf("event.replayed payload %s", m.Data)
	}
}

// A client leaving a parked stream (the default on HTTP/1.1, nothing
// written to notice it) ends the stream: its subscription is closed and
// its Hub admission given back.
func TestSSEClientLeavingAParkedStreamFreesItsSubscription(t *testing.T) {
	hub := transport.NewHub(0)
	t.Cleanup(func() { _ = hub.Shutdown(context.Background()) })
	e := newSSEEnv(t, dialectd.SSEConfig{Hub: hub, Heartbeat: time.Hour})
	subs := func() float64 {
		v, _, _ := gatewaytest.MetricSeries(t, e.reg, "aep_delivery_subscriptions", nil)
		return v
	}
	tn := gateway.DevTenant
	s, _ := e.open("types=task.*", nil)
	if subs() != 1 || hub.Open(tn) != 1 {
		t.Fatalf("open stream: %v subscriptions, %d admitted", subs(), hub.Open(tn))
	}
	gatewaytest.Poll(t, "the stream to park", func() bool { return hub.Parked() == 1 })
	s.Close()
	gatewaytest.Poll(t, "the stream to end", func() bool { return subs() == 0 && hub.Open(tn) == 0 && hub.Parked() == 0 })
	// the next stream still works
	s, _ = e.open("types=task.*", nil)
	e.ingest(dEvent("evt_1", "task.created", "s1"))
	if m := s.next(); m.Event != "task.created" {
		t.Fatalf("after a stream ended: %+v", m)
	}
}
