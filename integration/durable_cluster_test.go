package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// durableCluster is three (or more) gateway processes on one Kafka with a
// durable subscription, for the cluster tests of issue 10
// (docs/durable-cluster.md), in one live-delivery mode (liveModeArgs).
type durableCluster struct {
	t      *testing.T
	b      *Broker
	prefix string
	nodes  []*gatewayProc
	dead   map[*gatewayProc]bool
	mu     sync.Mutex
	subID  string
}

func newDurableCluster(t *testing.T, n int, subBody string) *durableCluster {
	t.Helper()
	return newDurableClusterIn(t, "tail", n, subBody)
}

// newDurableClusterIn is newDurableCluster in live-delivery mode.
func newDurableClusterIn(t *testing.T, mode string, n int, subBody string) *durableCluster {
	t.Helper()
	b := StartBroker(t)
	c := &durableCluster{t: t, b: b, prefix: strings.ReplaceAll(TopicName(t), "_", "-"), dead: map[*gatewayProc]bool{}}
	args := append([]string{"--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", c.prefix + ".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1"},
		liveModeArgs(mode, c.prefix)...)
	for range n {
		c.nodes = append(c.nodes, startGateway(t, args...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := c.nodes[0].post(ctx, "/aep/subscriptions", "application/json", nil, subBody)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err != nil || res.status != http.StatusCreated || json.Unmarshal(res.body, &created) != nil {
		t.Fatalf("create: %v %d %s", err, res.status, res.body)
	}
	c.subID = created.ID
	return c
}

func (c *durableCluster) kill(g *gatewayProc) {
	c.mu.Lock()
	c.dead[g] = true
	c.mu.Unlock()
	g.kill()
}

// alive returns the live nodes other than but.
func (c *durableCluster) alive(but *gatewayProc) []*gatewayProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*gatewayProc
	for _, g := range c.nodes {
		if !c.dead[g] && g != but {
			out = append(out, g)
		}
	}
	return out
}

// openStream opens the subscription's stream on g; it retries 409 and 503
// (a takeover under way) until ctx ends.
func (c *durableCluster) openStream(ctx context.Context, g *gatewayProc) (*http.Response, error) {
	return openDurableStream(ctx, g, c.subID)
}

// openDurableStream opens subscription id's stream on g; it retries 409
// and 503 (a takeover under way) until ctx ends.
func openDurableStream(ctx context.Context, g *gatewayProc, id string) (*http.Response, error) {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/subscriptions/"+id+"/stream", nil)
		r, err := http.DefaultClient.Do(req)
		if err == nil && r.StatusCode == http.StatusOK {
			return r, nil
		}
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusConflict && r.StatusCode != http.StatusServiceUnavailable {
				return nil, fmt.Errorf("stream on %s: %d %s", g.URL, r.StatusCode, b)
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stream on %s: %w (last: %v)", g.URL, ctx.Err(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ack posts ids to a random live node, moving on to another one when the
// chosen one is gone (a transport error); any answer other than 200 with a
// result of applied, recorded or unknown is a refusal.
func (c *durableCluster) ack(ctx context.Context, rng *rand.Rand, rngMu *sync.Mutex, ids []string) error {
	body := ackBatch(ids)
	for attempt := 0; ; attempt++ {
		nodes := c.alive(nil)
		rngMu.Lock()
		g := nodes[rng.IntN(len(nodes))]
		rngMu.Unlock()
		r, err := g.post(ctx, "/aep/subscriptions/"+c.subID+"/acks", "application/json", nil, body)
		if err != nil {
			if ctx.Err() != nil || attempt > 20 {
				return fmt.Errorf("acks: %w", err)
			}
			continue // the node died under the request: the acks go to another
		}
		var out struct {
			Results []struct {
				ID     string `json:"acknowledged_event_id"`
				Result string `json:"result"`
			} `json:"results"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &out) != nil || len(out.Results) != len(ids) {
			return fmt.Errorf("acks refused by %s: %d %s", g.URL, r.status, r.body)
		}
		for _, x := range out.Results {
			switch x.Result {
			case "applied", "recorded", "unknown":
			default:
				return fmt.Errorf("ack of %s refused by %s: %s", x.ID, g.URL, r.body)
			}
		}
		return nil
	}
}

// ackBatch is a JSON array of event.acknowledged envelopes for ids.
func ackBatch(ids []string) string {
	var body strings.Builder
	body.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"type":"event.acknowledged","payload":{"acknowledged_event_id":%q}}`, id)
	}
	body.WriteByte(']')
	return body.String()
}

// journalEpochs reads the subscription's records in the journal and
// returns an error when a stream reserved deliveries after a newer stream
// had started delivering (two holders at once), plus the epochs that
// delivered. A reservation an older holder wrote (its "ts", the writer's
// clock: every node runs on this machine) before the newer epoch's first
// one but that the broker appended after it is not an overlap: it was in
// flight through a broker outage, and the older holder checks its lease
// again before handing anything out after it (the consumer-side checks
// see what was really delivered).
func (c *durableCluster) journalEpochs(ctx context.Context) ([]int64, error) {
	topic := c.prefix + ".default.events.subjournal"
	cl := c.b.Client(c.t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ends, err := c.b.Admin(c.t).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	end, _ := ends.Lookup(topic, 0)
	var active int64 = -1
	var activeSince time.Time
	var epochs []int64
	for read := int64(0); read < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			read = r.Offset + 1
			if string(r.Key) != c.subID {
				continue
			}
			var rec struct {
				T  string    `json:"t"`
				E  int64     `json:"e"`
				TS time.Time `json:"ts"`
			}
			if json.Unmarshal(r.Value, &rec) != nil || rec.T != "deliver" {
				continue
			}
			if rec.E < active && !rec.TS.Before(activeSince) {
				return epochs, fmt.Errorf("epoch %d reserved deliveries at journal offset %d (written %s) after epoch %d had started delivering (%s)", rec.E, r.Offset, rec.TS.Format(time.RFC3339Nano), active, activeSince.Format(time.RFC3339Nano))
			}
			if rec.E > active {
				active, activeSince = rec.E, rec.TS
				epochs = append(epochs, rec.E)
			}
		}
	}
	return epochs, nil
}

// Three gateways, 10k events over 50 sessions published through node 0,
// the subscription streamed from the others, each ack batch posted to a
// random node, random connection drops, one half-open connection (the
// consumer stops reading without closing and reconnects elsewhere) and a
// SIGKILL of the serving node mid-stream. Every event is acknowledged, no
// ack is refused, per-session order holds on every connection, every
// repeated delivery is marked with attempt >= 2, and the journal shows no
// two streams delivering at once. Takeover times are logged. In both
// live-delivery modes (workers: every node --role all).
func TestDurableClusterTakeover(t *testing.T) {
	for _, mode := range liveModes {
		t.Run(mode, func(t *testing.T) { testDurableClusterTakeover(t, mode) })
	}
}

func testDurableClusterTakeover(t *testing.T, mode string) {
	const sessions = 50
	n := 10000
	if testing.Short() {
		n = 2000
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	var rngMu sync.Mutex
	t.Logf("seed %d, %d events over %d sessions", seed, n, sessions)
	c := newDurableClusterIn(t, mode, 3, `{"types":["task.*"],"ack_timeout_ms":2000,"max_attempts":100}`)
	pub := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 110*time.Second)
	defer cancel()

	pubErr := make(chan error, 1)
	go func() {
		for start := 0; start < n; start += 100 {
			var body strings.Builder
			for i := start; i < min(start+100, n); i++ {
				body.WriteString(dEvent(i, fmt.Sprintf("sess_%d", i%sessions)) + "\n")
			}
			r, err := pub.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String())
			if err != nil || r.status != http.StatusAccepted {
				pubErr <- fmt.Errorf("batch at %d: %v %d %s", start, err, r.status, r.body)
				return
			}
			time.Sleep(20 * time.Millisecond) // a stream to consume while it runs
		}
		pubErr <- nil
	}()

	var (
		ackedMu   sync.Mutex
		acked     = map[string]bool{}
		ackErr    = make(chan error, 1)
		delivered = map[string]int{} // id -> deliveries seen, every connection
		takeovers []time.Duration
		halfOpen  *http.Response
		killed    bool
		unmarked  []string
		lost      time.Time
		firsts    int
		repeats   int
	)
	cur := c.nodes[1]
	conns := 0
	for conn := 0; ; conn++ {
		conns = conn
		ackedMu.Lock()
		done := len(acked) == n
		ackedMu.Unlock()
		if done {
			break
		}
		select {
		case err := <-ackErr:
			t.Fatal(err)
		default:
		}
		if ctx.Err() != nil {
			ackedMu.Lock()
			t.Fatalf("deadline: %d of %d acknowledged after %d connections", len(acked), n, conn)
		}
		began := time.Now()
		if !lost.IsZero() {
			began = lost // the kill: the takeover runs from there
		}
		lost = time.Time{}
		resp, err := c.openStream(ctx, cur)
		if err != nil {
			t.Fatal(err)
		}
		// a stream that waits for the previous holder answers at once (its
		// waiting comments): the takeover ends with its first event
		takeoverOpen := conn > 0
		epoch := resp.Header.Get("AEP-Stream-Epoch")
		ackCh := make(chan string, 8192)
		var ackWG sync.WaitGroup
		ackWG.Add(1)
		go func() {
			defer ackWG.Done()
			for id := range ackCh {
				batch := batchFrom(id, ackCh, 50)
				if err := c.ack(ctx, rng, &rngMu, batch); err != nil {
					select {
					case ackErr <- err:
					default:
					}
					return
				}
				ackedMu.Lock()
				for _, id := range batch {
					acked[id] = true
				}
				all := len(acked) == n
				ackedMu.Unlock()
				if all {
					cancelStream(resp)
				}
			}
		}()

		msgs := 0
		dropAt := -1
		killAt, halfAt := -1, -1
		switch {
		case !killed && conn >= 2 && cur != pub:
			killAt = 100 + rng.IntN(n/20)
		case killed && halfOpen == nil:
			halfAt = 100 + rng.IntN(n/20)
		case conn < 8:
			rngMu.Lock()
			dropAt = 50 + rng.IntN(n/20)
			rngMu.Unlock()
		}
		lastSeq := map[string]int{}
		var notice *struct {
			Original string `json:"original_event_id"`
			Attempt  int    `json:"attempt"`
		}
		var ended string
		_ = gatewaytest.ParseSSE(resp.Body, func(sm gatewaytest.SSEMessage) bool {
			if !sm.HasData || sm.Data == "" {
				return true
			}
			msgs++
			if takeoverOpen {
				takeovers = append(takeovers, time.Since(began))
				takeoverOpen = false
			}
			if sm.Event == "event.redelivered" {
				var m struct {
					Payload struct {
						Original string `json:"original_event_id"`
						Attempt  int    `json:"attempt"`
					} `json:"payload"`
				}
				if json.Unmarshal([]byte(sm.Data), &m) != nil || m.Payload.Attempt < 2 || notice != nil {
					ended = "bad event.redelivered: " + sm.Data
					return false
				}
				notice = &m.Payload
				return true
			}
			var e struct {
				ID      string          `json:"id"`
				Session string          `json:"session_id"`
				Payload struct{ I int } `json:"payload"`
			}
			if sm.Event != "task.progress" || json.Unmarshal([]byte(sm.Data), &e) != nil {
				ended = "unexpected message " + sm.Event + ": " + sm.Data
				return false
			}
			attempt := 1
			if notice != nil {
				if notice.Original != e.ID {
					ended = "event.redelivered of " + notice.Original + " followed by " + e.ID
					return false
				}
				attempt, notice = notice.Attempt, nil
			}
			if attempt == 1 {
				firsts++
				if delivered[e.ID] > 0 {
					unmarked = append(unmarked, e.ID)
				}
				// per-session order: a first delivery comes after every
				// event of its session delivered on this connection
				if last, ok := lastSeq[e.Session]; ok && e.Payload.I <= last {
					ended = fmt.Sprintf("session %s: first delivery of %d after %d", e.Session, e.Payload.I, last)
					return false
				}
			} else {
				repeats++
			}
			if last, ok := lastSeq[e.Session]; !ok || e.Payload.I > last {
				lastSeq[e.Session] = e.Payload.I
			}
			delivered[e.ID]++
			ackCh <- e.ID
			switch {
			case dropAt > 0 && msgs >= dropAt:
				return false
			case killAt > 0 && msgs >= killAt:
				killed = true
				c.kill(cur) // SIGKILL: no final commit, no release
				lost = time.Now()
				return false
			case halfAt > 0 && msgs >= halfAt:
				halfOpen = resp // kept open, never read again
				return false
			}
			return true
		})
		if ended != "" {
			t.Fatalf("connection %d (epoch %s on %s): %s", conn, epoch, cur.URL, ended)
		}
		t.Logf("connection %d: node %d epoch %s, %d messages (drop at %d, kill at %d, half-open at %d)", conn, slices.Index(c.nodes, cur), epoch, msgs, dropAt, killAt, halfAt)
		if halfOpen != resp {
			resp.Body.Close()
		}
		close(ackCh)
		ackWG.Wait()
		others := c.alive(cur)
		rngMu.Lock()
		cur = others[rng.IntN(len(others))]
		rngMu.Unlock()
	}
	cancel()
	if halfOpen != nil {
		halfOpen.Body.Close()
	}
	// acks posted on other nodes, from their journal write to being applied
	// by the holder (the last serving node's histogram)
	for _, g := range c.alive(nil) {
		nAcks, p50, p99 := histogramQuantiles(t, g, "aep_delivery_remote_ack_seconds")
		t.Logf("acks posted on another node, applied by %s: %.0f batches, p50 %s, p99 %s", g.URL, nAcks, p50, p99)
	}
	if err := <-pubErr; err != nil && !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("publish: %v", err)
	}
	if len(unmarked) > 0 {
		t.Fatalf("%d repeated deliveries without event.redelivered, e.g. %v", len(unmarked), unmarked[:min(5, len(unmarked))])
	}
	if !killed || halfOpen == nil {
		t.Fatalf("faults not exercised: killed %v, half-open %v", killed, halfOpen != nil)
	}
	jctx, jcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer jcancel()
	epochs, err := c.journalEpochs(jctx)
	if err != nil {
		t.Fatalf("journal: %v", err)
	}
	slices.Sort(takeovers)
	t.Logf("%d events acknowledged; %d first deliveries, %d marked repeats; %d connections, %d streams delivered (epochs %v); takeover times: median %v, max %v (all %v)",
		n, firsts, repeats, conns, len(epochs), epochs, takeovers[len(takeovers)/2], takeovers[len(takeovers)-1], takeovers)
	if takeovers[len(takeovers)-1] > 10*time.Second {
		t.Fatalf("a takeover took %v, more than 10s", takeovers[len(takeovers)-1])
	}
}

// cancelStream ends a stream's response body from another goroutine.
func cancelStream(r *http.Response) { _ = r.Body.Close() }

// readEvents reads SSE messages of a durable stream until stop says so or
// the body ends; it returns the events (id and whether a notice marked
// them as repeats).
func readEvents(body io.Reader, stop func(id string, repeat bool) bool) {
	repeat := false
	_ = gatewaytest.ParseSSE(body, func(sm gatewaytest.SSEMessage) bool {
		if !sm.HasData || sm.Data == "" {
			return true
		}
		if sm.Event == "event.redelivered" {
			repeat = true
			return true
		}
		var e struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal([]byte(sm.Data), &e)
		r := repeat
		repeat = false
		return !stop(e.ID, r)
	})
}

// Ack durability: the node serving the stream answers a batch of acks and
// is SIGKILLed at once (before any periodic commit); the stream moves to
// another node, which never delivers those events again. In both
// live-delivery modes.
func TestDurableAckSurvivesKill(t *testing.T) {
	for _, mode := range liveModes {
		t.Run(mode, func(t *testing.T) { testDurableAckSurvivesKill(t, mode) })
	}
}

func testDurableAckSurvivesKill(t *testing.T, mode string) {
	const n = 200
	c := newDurableClusterIn(t, mode, 2, `{"types":["task.*"],"ack_timeout_ms":30000}`)
	a, b := c.nodes[0], c.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.openStream(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		var body strings.Builder
		for i := from; i < to; i++ {
			body.WriteString(dEvent(i, fmt.Sprintf("sess_%d", i%7)) + "\n")
		}
		if r, err := b.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String()); err != nil || r.status != http.StatusAccepted {
			t.Fatalf("publish: %v %d %s", err, r.status, r.body)
		}
	}
	publish(0, n)
	var ids []string
	readEvents(resp.Body, func(id string, _ bool) bool {
		ids = append(ids, id)
		return len(ids) == n
	})
	if len(ids) != n {
		t.Fatalf("read %d of %d events", len(ids), n)
	}
	r, err := a.post(ctx, "/aep/subscriptions/"+c.subID+"/acks", "application/json", nil, ackBatch(ids))
	if err != nil || r.status != http.StatusOK || strings.Count(string(r.body), `"result":"applied"`) != n {
		t.Fatalf("acks: %v %d %s", err, r.status, r.body)
	}
	c.kill(a) // right after the answer: no commit interval has passed
	resp.Body.Close()
	began := time.Now()
	resp, err = c.openStream(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	t.Logf("stream served by the other node %v after the kill", time.Since(began))
	publish(n, n+1) // the sentinel: the first thing the new stream may deliver
	var again []string
	readEvents(resp.Body, func(id string, repeat bool) bool {
		if id == fmt.Sprintf("evt_sess_%d_%04d", n%7, n) {
			return true
		}
		again = append(again, id)
		return false
	})
	if len(again) > 0 {
		t.Fatalf("%d acknowledged events delivered again after the kill, e.g. %v", len(again), again[:min(5, len(again))])
	}
}

// A WebSocket session attached to a durable subscription by id
// ({"subscription_id": "sub_…"} in subscription.requested) acks over the
// socket; its node is SIGKILLed; a session on another node attaches to the
// same subscription and gets everything not acknowledged, every repeat
// marked by event.redelivered, and no acknowledged event again. In both
// live-delivery modes.
func TestDurableWebSocketAttachSurvivesKill(t *testing.T) {
	for _, mode := range liveModes {
		t.Run(mode, func(t *testing.T) { testDurableWebSocketAttachSurvivesKill(t, mode) })
	}
}

func testDurableWebSocketAttachSurvivesKill(t *testing.T, mode string) {
	const n = 100
	c := newDurableClusterIn(t, mode, 2, `{"types":["task.*"],"ack_timeout_ms":30000}`)
	a, b := c.nodes[0], c.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	publish := func(from, to int) {
		var body strings.Builder
		for i := from; i < to; i++ {
			body.WriteString(dEvent(i, fmt.Sprintf("sess_%d", i%5)) + "\n")
		}
		if r, err := b.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String()); err != nil || r.status != http.StatusAccepted {
			t.Fatalf("publish: %v %d %s", err, r.status, r.body)
		}
	}
	attach := func(g *gatewayProc) *gatewaytest.WSD {
		ws := gatewaytest.DialWSD(t, gatewaytest.WSURL(g.URL, "/aep"), gatewaytest.WSOptions{Buffer: 4 * n})
		if id := ws.MustSubscribe("evt_attach", `{"subscription_id":"`+c.subID+`"}`); id != c.subID {
			t.Fatalf("attached as %q, want %s", id, c.subID)
		}
		return ws
	}
	acked := map[string]bool{}
	seen := map[string]bool{}
	mustMark := map[string]bool{} // delivered before the kill, not acknowledged
	// read takes events until want distinct ones were seen in all; it acks
	// the first ackN of them.
	read := func(ws *gatewaytest.WSD, want, ackN int) {
		repeat := false
		for len(seen) < want {
			m := ws.Next()
			switch {
			case m.Type == "event.redelivered":
				repeat = true
				continue
			case !m.Delivered():
				continue
			}
			if (seen[m.ID] || mustMark[m.ID]) && !repeat {
				t.Fatalf("%s delivered again without event.redelivered", m.ID)
			}
			if acked[m.ID] {
				t.Fatalf("%s delivered again after it was acknowledged", m.ID)
			}
			repeat = false
			seen[m.ID] = true
			if len(acked) < ackN {
				acked[m.ID] = true
				ws.Send(gatewaytest.DControl("evt_ack_"+m.ID, "event.acknowledged", `{"acknowledged_event_id":"`+m.ID+`"}`))
			}
		}
	}
	ws := attach(a)
	publish(0, n)
	read(ws, n, n/2)
	time.Sleep(500 * time.Millisecond) // acks over a socket have no answer: let them reach the journal
	c.kill(a)
	began := time.Now()
	ws = attach(b)
	t.Logf("attached on the other node %v after the kill", time.Since(began))
	publish(n, 2*n)
	for id := range seen { // what was not acknowledged comes again, marked
		if !acked[id] {
			delete(seen, id)
			mustMark[id] = true
		}
	}
	read(ws, 2*n, 2*n)
	ws.Close()
}
