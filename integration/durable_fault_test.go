package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// EnvFaultReport names a file that gets one line per fault case (takeover
// times, acks, dead letters, redeliveries): CI sets it and prints the file.
const EnvFaultReport = "AEP_IT_FAULT_REPORT"

// The fault suite of issue 23 (docs/durable-cluster.md, "Fault suite"): three gateway processes on one
// broker, a durable at_least_once subscription (max_attempts 3, ack_timeout_ms 30000), events over 50
// sessions published through node 3, a consumer that streams the subscription from node 1 over SSE and
// acknowledges everything it receives, each ack batch posted to a random node; then one fault per case.
// Every case asserts: every event acknowledged, no dead letter, every repeat marked by event.redelivered,
// per-session order of first deliveries on every connection, no two epochs delivering at once (journal),
// no delivery on an older connection after a newer one got events, and the gateway's redelivery counter
// against the redeliveries the consumer received. A second run (TestDurableFaultDeadLetters) never acks
// one session: exactly its events are dead-lettered, each after max_attempts deliveries, across a SIGKILL.

const (
	faultSessions = 50
	faultAttempts = 3
)

// faultCase is one fault scenario; the consumer's behaviour and the fault it meets.
type faultCase struct {
	name       string
	watchdog   time.Duration // the consumer reconnects (to a random other node) after this long without a message
	kills      int           // SIGKILLs of the serving node, at 1/3 (and 2/3) of the distinct events received
	drops      int           // connections the consumer closes at random points
	halfOpen   bool          // one connection the consumer stops reading without closing it
	stop       time.Duration // SIGSTOP of the serving node at 1/3 for this long, then SIGCONT
	broker     bool          // SIGKILL and restart of the (own) Kafka broker at 1/3
	ackTimeout time.Duration // the subscription's ack_timeout_ms (30 s unless set)
	neverAck   int           // >= 0: the session never acknowledged (the dead-letter run); -1 none
	// drainKilled: after a SIGKILL the consumer reads the dead node's connection to its end (what the
	// node wrote before dying still arrives), so what it receives is exactly what was handed to it;
	// otherwise it drops the connection at the kill, losing what was in flight, as with a crashed machine.
	drainKilled bool
}

// faultSize is the number of events per case: 10k with AEP_TEST_LONG=1 (CI), fewer otherwise.
func faultSize() int {
	if os.Getenv("AEP_TEST_LONG") == "1" && !testing.Short() {
		return 10000
	}
	if testing.Short() {
		return 1000
	}
	return 2000
}

// TestDurableFaults runs cases (a) to (f) of issue 23 on one gateway trio (a subscription of its own per
// case; nodes killed in a case are started again before the next), and case (g), the broker restart, on
// an own broker with its own trio.
func TestDurableFaults(t *testing.T) {
	n := faultSize()
	began := time.Now()
	defer func() {
		t.Logf("fault suite: %d events per case, wall time %v", n, time.Since(began).Round(time.Second))
	}()
	fc := newFaultCluster(t, StartBroker(t))
	cases := []faultCase{
		{name: "a-patient-kill", watchdog: 15 * time.Second, kills: 1},
		{name: "b-watchdog-1s-kill", watchdog: time.Second, kills: 1},
		{name: "c-watchdog-3s-kill", watchdog: 3 * time.Second, kills: 1},
		{name: "d-drops-halfopen", watchdog: 15 * time.Second, drops: 3, halfOpen: true},
		{name: "e-kill-twice", watchdog: 15 * time.Second, kills: 2},
		{name: "f-sigstop-10s", watchdog: 3 * time.Second, stop: 10 * time.Second},
	}
	for _, c := range cases {
		c.neverAck = -1
		t.Run(c.name, func(t *testing.T) { fc.run(t, c, n) })
	}
	t.Run("g-broker-restart", func(t *testing.T) {
		k := StartKafkaProc(t)
		own := newFaultCluster(t, &Broker{Seeds: k.Seeds, Kind: KindExternal})
		own.kafka = k
		own.run(t, faultCase{name: "g-broker-restart", watchdog: 15 * time.Second, broker: true, neverAck: -1}, n)
	})
}

// TestDurableFaultDeadLetters is the second run: the consumer acknowledges everything except one
// session, which it never acks (and never rejects), and the serving node is SIGKILLed at 1/3. Exactly
// that session's events are dead-lettered, each with attempts = max_attempts in its dead letter, and
// each was received by the consumer max_attempts times (the consumer reads the killed node's connection
// to its end, so it receives everything handed to it). A short ack timeout (3 s) keeps the run short.
func TestDurableFaultDeadLetters(t *testing.T) {
	n := faultSize()
	fc := newFaultCluster(t, StartBroker(t))
	fc.run(t, faultCase{name: "dead-letters-kill", watchdog: 15 * time.Second, kills: 1,
		ackTimeout: 3 * time.Second, neverAck: 7, drainKilled: true}, n)
}

// faultCluster is the gateway trio of the suite. Node 1 (index 0) serves the first stream, node 3
// (index 2) takes the publishing. Nodes are started with the parent test's t; a node killed in a case is
// started again, with the case's t, by the next case.
type faultCluster struct {
	b      *Broker
	kafka  *KafkaProc // the own broker of case (g), else nil
	prefix string
	args   []string
	nodes  []*gatewayProc

	mu      sync.Mutex
	stopped map[*gatewayProc]bool // SIGSTOPped: not used by the consumer or the acker
}

func newFaultCluster(t *testing.T, b *Broker) *faultCluster {
	t.Helper()
	fc := &faultCluster{b: b, prefix: strings.ReplaceAll(TopicName(t), "_", "-"), stopped: map[*gatewayProc]bool{}}
	fc.args = []string{"--kafka-brokers", strings.Join(b.Seeds, ","),
		"--topic-template", fc.prefix + ".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1"}
	if b.Kind != KindEmbedded { // registered first, so it runs after the gateways are gone
		t.Cleanup(func() { fc.deleteTopics(t) })
	}
	for range 3 {
		fc.nodes = append(fc.nodes, startGateway(t, fc.args...))
	}
	return fc
}

// deleteTopics deletes the topics the gateways created under the cluster's prefix (events, journal,
// dead letters, definitions, index): on a shared broker the suite leaves nothing behind.
func (fc *faultCluster) deleteTopics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(fc.b.Seeds...))
	if err != nil {
		t.Logf("integration: delete topics: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tds, err := adm.ListTopics(ctx)
	if err != nil {
		t.Logf("integration: delete topics: %v", err)
		return
	}
	var mine []string
	for _, name := range tds.Names() {
		if strings.HasPrefix(name, fc.prefix+".") {
			mine = append(mine, name)
		}
	}
	if len(mine) == 0 {
		return
	}
	if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
		t.Logf("integration: delete topics %v: %v", mine, err)
	}
}

func exited(g *gatewayProc) bool {
	select {
	case <-g.exited:
		return true
	default:
		return false
	}
}

// ensure starts again every node that is gone (a kill in an earlier case).
func (fc *faultCluster) ensure(t *testing.T) {
	t.Helper()
	for i, g := range fc.nodes {
		if exited(g) {
			fc.nodes[i] = startGateway(t, fc.args...)
		}
	}
}

// alive returns the running, not stopped, nodes other than but.
func (fc *faultCluster) alive(but *gatewayProc) []*gatewayProc {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var out []*gatewayProc
	for _, g := range fc.nodes {
		if g != but && !exited(g) && !fc.stopped[g] {
			out = append(out, g)
		}
	}
	return out
}

func (fc *faultCluster) setStopped(g *gatewayProc, stopped bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.stopped[g] = stopped
}

func (fc *faultCluster) index(g *gatewayProc) int { return slices.Index(fc.nodes, g) + 1 }

// createSubscription creates the case's subscription on node 1; it starts at the topic's end, so it
// sees only the events the case publishes after it.
func (fc *faultCluster) createSubscription(ctx context.Context, c faultCase) (string, error) {
	ackTimeout := c.ackTimeout
	if ackTimeout == 0 {
		ackTimeout = 30 * time.Second
	}
	body := fmt.Sprintf(`{"types":["task.*"],"ack_timeout_ms":%d,"max_attempts":%d}`, ackTimeout.Milliseconds(), faultAttempts)
	res, err := fc.nodes[0].post(ctx, "/aep/subscriptions", "application/json", nil, body)
	var created struct {
		ID string `json:"subscription_id"`
	}
	if err != nil || res.status != http.StatusCreated || json.Unmarshal(res.body, &created) != nil {
		return "", fmt.Errorf("create subscription: %v %d %s", err, res.status, res.body)
	}
	return created.ID, nil
}

// publish sends n events of case c (ids evt_<case>_<session>_<i>) through node 3 in batches of 100.
func (fc *faultCluster) publish(ctx context.Context, c faultCase, n int) error {
	pub := fc.nodes[2]
	for start := 0; start < n; start += 100 {
		var body strings.Builder
		for i := start; i < min(start+100, n); i++ {
			body.WriteString(dEvent(i, faultSession(c, i%faultSessions)) + "\n")
		}
		r, err := pub.post(ctx, "/aep/events", "application/x-ndjson", nil, body.String())
		if err != nil || r.status != http.StatusAccepted {
			return fmt.Errorf("publish batch at %d: %v %d %s", start, err, r.status, r.body)
		}
	}
	return nil
}

func faultSession(c faultCase, s int) string {
	return strings.ReplaceAll(c.name, "-", "_") + "_s" + fmt.Sprint(s)
}

// redeliveryCounters reads aep_delivery_redeliveries_total of every running, not stopped node.
func (fc *faultCluster) redeliveryCounters(t *testing.T) map[*gatewayProc]float64 {
	out := map[*gatewayProc]float64{}
	for _, g := range fc.alive(nil) {
		out[g] = metricSum(t, g, "aep_delivery_redeliveries_total")
	}
	return out
}

// faultConn is one stream connection of the consumer. Its reader goroutine owns the HTTP response;
// the case's main loop owns the rest of the fields.
type faultConn struct {
	k      int
	node   *gatewayProc
	cancel context.CancelFunc // closes the connection
	halt   atomic.Bool        // stop reading, keep the socket open (half-open)
	opened time.Time
	active time.Time // the last message (comments included), for the watchdog
	first  time.Time // the first delivery on it (an event, event.redelivered, event.dead_lettered)
	last   time.Time // the last delivery on it
	epoch  string
	events int
	notice *redeliveredNotice
	order  map[string]int // session -> highest payload.i seen on this connection
	why    string         // why the consumer left it
	// frozen: the consumer gave up on it but still reads it, its messages only timestamped (its node
	// was SIGSTOPped, or in case g its watchdog fired during the broker's outage)
	frozen bool
	// messages read after the freeze (what the node had written before it, then anything after)
	afterFreeze int
}

type redeliveredNotice struct {
	Original string `json:"original_event_id"`
	Attempt  int    `json:"attempt"`
}

// connMsg is what a reader goroutine hands the main loop: an SSE message, the response's epoch, or the
// end of the connection.
type connMsg struct {
	c     *faultConn
	at    time.Time
	sm    gatewaytest.SSEMessage
	epoch string
	open  bool
	end   error
	done  bool
}

// read opens c's stream (retrying 409/503 until ctx ends) and forwards its messages to out until ctx
// ends, the body ends or c is halted; a halted connection stays open until ctx ends.
func (c *faultConn) read(ctx context.Context, subID string, out chan<- connMsg) {
	send := func(m connMsg) bool {
		m.c = c
		select {
		case out <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	resp, err := openDurableStream(ctx, c.node, subID)
	if err != nil {
		send(connMsg{done: true, end: err, at: time.Now()})
		return
	}
	defer resp.Body.Close()
	if !send(connMsg{open: true, epoch: resp.Header.Get("AEP-Stream-Epoch"), at: time.Now()}) {
		return
	}
	err = gatewaytest.ParseSSE(resp.Body, func(sm gatewaytest.SSEMessage) bool {
		if c.halt.Load() {
			return false
		}
		return send(connMsg{sm: sm, at: time.Now()})
	})
	if c.halt.Load() {
		<-ctx.Done() // half-open: the socket stays, unread, until the case ends
		return
	}
	if err == nil {
		err = io.EOF
	}
	send(connMsg{done: true, end: err, at: time.Now()})
}

// faultRun is the state of one case's consumer.
type faultRun struct {
	t       *testing.T
	fc      *faultCluster
	c       faultCase
	n       int
	subID   string
	rng     *rand.Rand
	ctx     context.Context // the case
	connCtx context.Context // the case's connections: cancelled before the readers are waited for
	out     chan connMsg
	wg      sync.WaitGroup
	conns   []*faultConn
	cur     *faultConn
	ackCh   chan string
	failed  []string

	seen       map[string]int // id -> deliveries received, every connection
	firsts     int
	repeats    int // event.redelivered notices followed by their event
	unmarked   []string
	disorder   []string
	late       []string // deliveries on a connection after a newer one had events
	dlNotices  int
	faultAt    time.Time // the last fault not yet followed by an event on a newer connection
	takeovers  []time.Duration
	kills      int
	stoppedG   *gatewayProc
	contAt     time.Time
	brokerDone chan error
	dropAt     []int // distinct-event counts at which the consumer drops its connection
	halfAt     int
	counters   map[*gatewayProc]float64 // redelivery counters at the start of the case
	gwRedeliv  float64                  // counter increments of the case (killed nodes: read just before the kill)
	abandoned  int                      // connections left while events may have been in flight

	ackMu   sync.Mutex
	acked   map[string]bool
	ackErrs []string
}

func (r *faultRun) fail(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

// run plays case c with n events on fc; it reports failures with t.Errorf so that every check of the
// case is reported, and leaves no stream of the case behind (the subscription is deleted).
func (fc *faultCluster) run(t *testing.T, c faultCase, n int) {
	fc.ensure(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("AEP_FAULT_SEED"); v != "" { // replay a logged case
		if _, err := fmt.Sscan(v, &seed); err != nil {
			t.Fatalf("AEP_FAULT_SEED=%q: %v", v, err)
		}
	}
	deadline := 120*time.Second + time.Duration(n)*15*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	r := &faultRun{t: t, fc: fc, c: c, n: n, ctx: ctx, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		out: make(chan connMsg, 16), ackCh: make(chan string, 8*n), seen: map[string]int{},
		acked: map[string]bool{}, halfAt: -1}
	subID, err := fc.createSubscription(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	r.subID = subID
	defer func() { // the case's streams end with it
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		if g := fc.alive(nil); len(g) > 0 {
			req, _ := http.NewRequestWithContext(dctx, http.MethodDelete, g[0].URL+"/aep/subscriptions/"+subID, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	for range c.drops {
		r.dropAt = append(r.dropAt, n/10+r.rng.IntN(n*8/10))
	}
	slices.Sort(r.dropAt)
	if c.halfOpen {
		r.halfAt = n/10 + r.rng.IntN(n*8/10)
	}
	r.counters = fc.redeliveryCounters(t)
	t.Logf("case %s: seed %d, %d events over %d sessions, subscription %s, drops at %v, half-open at %d",
		c.name, seed, n, faultSessions, subID, r.dropAt, r.halfAt)

	// Everything is published before the stream opens: the faults then meet a stream with 2/3 of its
	// events still to come (a publisher retrying around a fault could write an event twice, which no
	// consumer check could tell from a redelivery).
	pubBegan := time.Now()
	if err := fc.publish(ctx, c, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("case %s: published %d events through node 3 in %v", c.name, n, time.Since(pubBegan).Round(time.Millisecond))
	var bg sync.WaitGroup // the acker
	bg.Add(1)
	go func() {
		defer bg.Done()
		r.acker()
	}()

	connCtx, connCancel := context.WithCancel(ctx)
	r.connCtx = connCtx
	r.open(connCtx, fc.nodes[0])
	r.loop()
	view := r.finalView()
	connCancel()
	r.wg.Wait()
	close(r.ackCh)
	bg.Wait()
	if r.stoppedG != nil { // never leave a node stopped
		_ = r.stoppedG.cmd.Process.Signal(syscall.SIGCONT)
		fc.setStopped(r.stoppedG, false)
	}
	if r.brokerDone != nil {
		if err := <-r.brokerDone; err != nil {
			r.fail("broker restart: %v", err)
		}
	}
	r.check(view)
	for _, f := range r.failed {
		t.Errorf("case %s: %s", c.name, f)
	}
}

// open starts a new connection on g; the previous one, if any, is left as it is (the caller closed,
// halted or kept it).
func (r *faultRun) open(ctx context.Context, g *gatewayProc) {
	cctx, cancel := context.WithCancel(ctx)
	c := &faultConn{k: len(r.conns), node: g, cancel: cancel, opened: time.Now(), order: map[string]int{}}
	c.active = c.opened
	r.conns = append(r.conns, c)
	r.cur = c
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		c.read(cctx, r.subID, r.out)
	}()
}

// moveOn leaves the current connection (closing it unless keep) and opens one on a random other node.
func (r *faultRun) moveOn(ctx context.Context, why string, keep bool) {
	old := r.cur
	old.why = why
	if !keep {
		old.cancel()
	}
	r.abandoned++
	others := r.fc.alive(old.node)
	if len(others) == 0 {
		others = r.fc.alive(nil)
	}
	if len(others) == 0 {
		r.fail("no node left to connect to after %s", why)
		return
	}
	r.open(ctx, others[r.rng.IntN(len(others))])
}

// done says whether the case reached its end: every event acknowledged, or in the dead-letter run every
// other event acknowledged and the never-acked session's events all dead-lettered; or, in either run,
// every event acknowledged or dead-lettered, when nothing more can come (the checks then report it).
func (r *faultRun) done() bool {
	r.ackMu.Lock()
	acked := len(r.acked)
	r.ackMu.Unlock()
	if r.c.neverAck < 0 && acked == r.n {
		return true
	}
	dl, err := r.fc.deadLetters(r.ctx, r.subID)
	if err != nil {
		return false
	}
	r.ackMu.Lock()
	settled := len(r.acked)
	for id := range dl {
		if !r.acked[id] {
			settled++
		}
	}
	r.ackMu.Unlock()
	if settled >= r.n {
		return true
	}
	if r.c.neverAck < 0 {
		return false
	}
	want := r.n - r.n/faultSessions // the events of the other sessions
	if r.n%faultSessions > r.c.neverAck {
		want--
	}
	return acked >= want && len(dl) >= r.n-want
}

// loop is the consumer: it processes messages, runs the watchdog, and injects the case's faults.
func (r *faultRun) loop() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	connCtx := r.connCtx
	lastDone := time.Time{}
	for {
		select {
		case <-r.ctx.Done():
			r.ackMu.Lock()
			r.fail("deadline: %d of %d events acknowledged, %d distinct received, %d connections", len(r.acked), r.n, len(r.seen), len(r.conns))
			r.ackMu.Unlock()
			return
		case m := <-r.out:
			r.handle(connCtx, m)
		case <-tick.C:
			if !r.contAt.IsZero() && time.Now().After(r.contAt) {
				_ = r.stoppedG.cmd.Process.Signal(syscall.SIGCONT)
				r.fc.setStopped(r.stoppedG, false)
				r.t.Logf("case %s: SIGCONT node %d", r.c.name, r.fc.index(r.stoppedG))
				r.contAt = time.Time{}
			}
			if time.Since(r.cur.active) > r.c.watchdog {
				// not a fault of its own: a takeover is timed from the fault before it, if any
				// the frozen node's connection is kept and read: it must stay silent
				if r.c.broker {
					// around a broker restart the old holder may come back to life: its connection is
					// kept and read, so that a delivery on it after the new one's first shows
					r.cur.frozen = true
				}
				r.moveOn(connCtx, fmt.Sprintf("watchdog after %v", r.c.watchdog), r.cur.frozen)
			}
			if time.Since(lastDone) > 2*time.Second {
				lastDone = time.Now()
				if r.done() {
					return
				}
			}
		}
		if len(r.failed) > 0 && strings.HasPrefix(r.failed[len(r.failed)-1], "no node left") {
			return
		}
	}
}

// handle processes one message of a reader.
func (r *faultRun) handle(ctx context.Context, m connMsg) {
	c := m.c
	switch {
	case m.open:
		c.epoch = m.epoch
		return
	case m.done:
		if c.why == "" {
			c.why = fmt.Sprintf("ended: %v", m.end)
		}
		if c == r.cur && ctx.Err() == nil {
			if r.faultAt.IsZero() {
				r.faultAt = m.at
			}
			r.moveOn(ctx, c.why, false)
		}
		return
	}
	if !m.sm.HasData || m.sm.Data == "" {
		if !c.frozen {
			c.active = m.at
		}
		return // a comment or a heartbeat
	}
	delivery := false // what only the holder of the stream may send
	switch m.sm.Event {
	case "task.progress", "event.redelivered", "event.dead_lettered":
		delivery = true
		c.last = m.at
	}
	if c.frozen {
		c.afterFreeze++ // read, timestamped, never processed: the consumer has given up on this node
		return
	}
	c.active = m.at
	if delivery && c.first.IsZero() {
		c.first = m.at
		if !r.faultAt.IsZero() && c.k > 0 {
			r.takeovers = append(r.takeovers, m.at.Sub(r.faultAt))
			r.faultAt = time.Time{}
		}
	}
	switch m.sm.Event {
	case "event.redelivered":
		var n struct {
			Payload redeliveredNotice `json:"payload"`
		}
		if json.Unmarshal([]byte(m.sm.Data), &n) != nil || n.Payload.Attempt < 2 || c.notice != nil {
			r.fail("connection %d: bad event.redelivered: %s", c.k, m.sm.Data)
		}
		c.notice = &n.Payload
		return
	case "event.dead_lettered":
		r.dlNotices++
		return
	case "task.progress":
	case "subscription.expired", "subscription.cancelled":
		// the server ended this stream (e.g. a newer claim took it over while it waited): move on
		c.why = fmt.Sprintf("ended by %s %.200s", m.sm.Event, m.sm.Data)
		if c == r.cur {
			if r.faultAt.IsZero() {
				r.faultAt = m.at
			}
			r.moveOn(ctx, c.why, false)
		}
		return
	default:
		r.fail("connection %d: unexpected message %s: %.200s", c.k, m.sm.Event, m.sm.Data)
		return
	}
	var e struct {
		ID      string          `json:"id"`
		Session string          `json:"session_id"`
		Payload struct{ I int } `json:"payload"`
	}
	if json.Unmarshal([]byte(m.sm.Data), &e) != nil {
		r.fail("connection %d: bad event %.200s", c.k, m.sm.Data)
		return
	}
	attempt := 1
	if c.notice != nil {
		if c.notice.Original != e.ID {
			r.fail("connection %d: event.redelivered of %s followed by %s", c.k, c.notice.Original, e.ID)
		}
		attempt, c.notice = c.notice.Attempt, nil
	}
	if attempt == 1 {
		r.firsts++
		if r.seen[e.ID] > 0 {
			r.unmarked = append(r.unmarked, e.ID)
		}
		if last, ok := c.order[e.Session]; ok && e.Payload.I <= last {
			r.disorder = append(r.disorder, fmt.Sprintf("connection %d: session %s: first delivery of %d after %d", c.k, e.Session, e.Payload.I, last))
		}
	} else {
		r.repeats++
	}
	if last, ok := c.order[e.Session]; !ok || e.Payload.I > last {
		c.order[e.Session] = e.Payload.I
	}
	r.seen[e.ID]++
	c.events++
	if r.c.neverAck < 0 || e.Session != faultSession(r.c, r.c.neverAck) {
		select {
		case r.ackCh <- e.ID:
		case <-r.ctx.Done():
		}
	}
	if c == r.cur {
		r.inject(ctx)
	}
}

// inject plays the case's faults once the consumer received enough distinct events.
func (r *faultRun) inject(ctx context.Context) {
	got := len(r.seen)
	switch {
	case r.kills < r.c.kills && got >= (r.kills+1)*r.n/3:
		g := r.cur.node
		if v, ok := r.counters[g]; ok {
			r.gwRedeliv += metricSum(r.t, g, "aep_delivery_redeliveries_total") - v
			delete(r.counters, g)
		}
		r.kills++
		r.faultAt = time.Now()
		g.kill()
		r.t.Logf("case %s: SIGKILL node %d (serving connection %d) after %d distinct events", r.c.name, r.fc.index(g), r.cur.k, got)
		if !r.c.drainKilled {
			// What the node had written but the consumer had not read yet is lost with it, as with a
			// crashed machine: the consumer drops the connection at once and moves to another node.
			r.moveOn(ctx, fmt.Sprintf("node killed after %d distinct events", got), false)
		}
	case r.c.stop > 0 && r.stoppedG == nil && got >= r.n/3:
		g := r.cur.node
		r.stoppedG = g
		r.fc.setStopped(g, true)
		r.faultAt = time.Now()
		_ = g.cmd.Process.Signal(syscall.SIGSTOP)
		// The consumer gets nothing more from this node (what it had written before is read and
		// timestamped, not processed); its watchdog moves it to another node, the old connection open.
		r.cur.frozen = true
		r.contAt = time.Now().Add(r.c.stop)
		r.t.Logf("case %s: SIGSTOP node %d (serving connection %d) after %d distinct events, for %v", r.c.name, r.fc.index(g), r.cur.k, got, r.c.stop)
	case r.c.broker && r.brokerDone == nil && got >= r.n/3:
		r.brokerDone = make(chan error, 1)
		r.faultAt = time.Now()
		r.t.Logf("case %s: SIGKILL of the broker after %d distinct events", r.c.name, got)
		go func() {
			began := time.Now()
			if err := r.fc.kafka.Kill(); err != nil {
				r.brokerDone <- err
				return
			}
			time.Sleep(2 * time.Second) // the outage itself: the broker stays away this long
			err := r.fc.kafka.Up()
			r.t.Logf("case %s: broker back %v after the kill", r.c.name, time.Since(began).Round(time.Millisecond))
			r.brokerDone <- err
		}()
	case len(r.dropAt) > 0 && got >= r.dropAt[0]:
		r.dropAt = r.dropAt[1:]
		r.faultAt = time.Now()
		r.moveOn(ctx, fmt.Sprintf("dropped after %d distinct events", got), false)
	case r.halfAt >= 0 && got >= r.halfAt:
		r.halfAt = -1
		r.faultAt = time.Now()
		r.cur.halt.Store(true)
		r.moveOn(ctx, fmt.Sprintf("half-open after %d distinct events", got), true)
	}
}

// acker posts the received ids in batches of up to 100, each batch to a random running node, retrying
// transport errors and 503 (the journal write failed) until the case ends.
func (r *faultRun) acker() {
	for id := range r.ackCh {
		batch := batchFrom(id, r.ackCh, 100)
		for attempt := 0; ; attempt++ {
			err := r.postAcks(batch)
			if err == nil {
				break
			}
			if r.ctx.Err() != nil {
				break
			}
			var refused *ackRefusal
			if errors.As(err, &refused) {
				r.ackMu.Lock()
				r.ackErrs = append(r.ackErrs, err.Error())
				r.ackMu.Unlock()
				break
			}
			time.Sleep(time.Duration(min(attempt+1, 10)) * 50 * time.Millisecond) // retry backoff
		}
	}
}

type ackRefusal struct{ msg string }

func (e *ackRefusal) Error() string { return e.msg }

func (r *faultRun) postAcks(ids []string) error {
	nodes := r.fc.alive(nil)
	if len(nodes) == 0 {
		return errors.New("no node to ack to")
	}
	g := nodes[rand.IntN(len(nodes))]
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	res, err := g.post(ctx, "/aep/subscriptions/"+r.subID+"/acks", "application/json", nil, ackBatch(ids))
	if err != nil {
		return err
	}
	if res.status == http.StatusServiceUnavailable || res.status == http.StatusConflict {
		return fmt.Errorf("acks on node %d: %d %s", r.fc.index(g), res.status, res.body)
	}
	var out struct {
		Results []struct {
			ID     string `json:"acknowledged_event_id"`
			Result string `json:"result"`
		} `json:"results"`
	}
	if res.status != http.StatusOK || json.Unmarshal(res.body, &out) != nil || len(out.Results) != len(ids) {
		return &ackRefusal{fmt.Sprintf("acks refused by node %d: %d %.300s", r.fc.index(g), res.status, res.body)}
	}
	r.ackMu.Lock()
	defer r.ackMu.Unlock()
	for _, x := range out.Results {
		switch x.Result {
		case "applied", "recorded", "unknown":
			r.acked[x.ID] = true
		default:
			r.ackErrs = append(r.ackErrs, fmt.Sprintf("ack of %s on node %d: %s", x.ID, r.fc.index(g), x.Result))
		}
	}
	return nil
}

// subView is the part of GET /aep/subscriptions/{id} the suite reads.
type subView struct {
	node          int
	Streaming     bool   `json:"streaming"`
	Redeliveries  uint64 `json:"redeliveries"`
	DeadLettered  uint64 `json:"dead_lettered"`
	PendingAcks   int    `json:"pending_acks"`
	Lag           int64  `json:"lag"`
	MaxAckPending *int   `json:"max_ack_pending"`
}

// finalView reads the subscription's view on the node of the current connection (which holds the
// stream, so the view carries its counters) and the redelivery counters of the running nodes.
func (r *faultRun) finalView() subView {
	if r.stoppedG != nil && !r.contAt.IsZero() {
		_ = r.stoppedG.cmd.Process.Signal(syscall.SIGCONT)
		r.fc.setStopped(r.stoppedG, false)
		r.contAt = time.Time{}
	}
	// the serving node first: its view carries the stream's counters; any node has max_ack_pending
	nodes := r.fc.alive(r.cur.node)
	if !exited(r.cur.node) {
		nodes = append([]*gatewayProc{r.cur.node}, nodes...)
	}
	var v subView
	var errs []string
	for _, g := range nodes {
		var err error
		if v, err = r.fc.view(g, r.subID); err == nil {
			break
		}
		errs = append(errs, err.Error())
	}
	if len(errs) == len(nodes) {
		r.fail("no node answered the subscription's view: %v", errs)
	}
	for g, now := range r.fc.redeliveryCounters(r.t) {
		if base, ok := r.counters[g]; ok {
			r.gwRedeliv += now - base
		}
	}
	return v
}

// view reads GET /aep/subscriptions/{id} on g.
func (fc *faultCluster) view(g *gatewayProc, id string) (subView, error) {
	v := subView{node: fc.index(g)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/aep/subscriptions/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return v, fmt.Errorf("view on node %d: %d %s", v.node, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return v, fmt.Errorf("view on node %d: %w", v.node, err)
	}
	return v, nil
}

// check runs the case's assertions and logs its summary line.
func (r *faultRun) check(view subView) {
	r.ackMu.Lock()
	acked, ackErrs := len(r.acked), r.ackErrs
	r.ackMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dl, err := r.fc.deadLetters(ctx, r.subID)
	if err != nil {
		r.fail("dead letters: %v", err)
	}
	var epochs []int64
	jc := &durableCluster{t: r.t, b: r.fc.b, prefix: r.fc.prefix, subID: r.subID}
	if epochs, err = jc.journalEpochs(ctx); err != nil {
		r.fail("journal: %v", err)
	}
	if r.c.neverAck < 0 {
		if acked != r.n {
			r.fail("%d of %d events acknowledged", acked, r.n)
		}
		if len(dl) > 0 {
			r.fail("%d dead letters (the consumer acknowledges everything it receives), e.g. %v", len(dl), firstKeys(dl))
		}
	} else {
		r.checkDeadLetters(dl)
	}
	if len(ackErrs) > 0 {
		r.fail("%d ack refusals, e.g. %v", len(ackErrs), ackErrs[:min(3, len(ackErrs))])
	}
	if len(r.unmarked) > 0 {
		r.fail("%d repeated deliveries without event.redelivered, e.g. %v", len(r.unmarked), r.unmarked[:min(5, len(r.unmarked))])
	}
	if len(r.disorder) > 0 {
		r.fail("%d per-session order violations, e.g. %v", len(r.disorder), r.disorder[:min(3, len(r.disorder))])
	}
	for _, c := range r.conns {
		for _, newer := range r.conns[c.k+1:] {
			if !newer.first.IsZero() && c.last.After(newer.first) {
				r.late = append(r.late, fmt.Sprintf("connection %d (node %d) delivered until %v after connection %d's first event", c.k, r.fc.index(c.node), c.last.Sub(newer.first), newer.k))
				break
			}
		}
	}
	if len(r.late) > 0 {
		r.fail("%d deliveries on an older connection after a newer one had events, e.g. %v", len(r.late), r.late[:min(3, len(r.late))])
	}
	switch {
	case r.kills < r.c.kills, r.c.stop > 0 && r.stoppedG == nil, r.c.broker && r.brokerDone == nil,
		len(r.dropAt) > 0, r.halfAt >= 0:
		r.fail("faults not all injected: kills %d/%d, stopped %v, broker %v, drops left %d, half-open left %v",
			r.kills, r.c.kills, r.stoppedG != nil, r.brokerDone != nil, len(r.dropAt), r.halfAt >= 0)
	}
	// The gateway counts a redelivery when it writes one; the consumer sees fewer when a connection
	// ends with redeliveries in flight. Each abandoned connection may hold at most max_ack_pending.
	diff := int64(r.gwRedeliv) - int64(r.repeats)
	bound := "unbounded: no max_ack_pending in the subscription's view"
	if view.MaxAckPending != nil {
		b := int64(r.abandoned * *view.MaxAckPending)
		bound = fmt.Sprintf("<= %d (%d abandoned connections x max_ack_pending %d)", b, r.abandoned, *view.MaxAckPending)
		if diff > b {
			r.fail("the gateway counted %d redeliveries more than the consumer received, over the bound %s", diff, bound)
		}
	} else if diff > 0 {
		r.fail("the gateway counted %d redeliveries more than the consumer received (%s)", diff, bound)
	}
	slices.Sort(r.takeovers)
	med, maxT := time.Duration(0), time.Duration(0)
	if len(r.takeovers) > 0 {
		med, maxT = r.takeovers[len(r.takeovers)/2], r.takeovers[len(r.takeovers)-1]
	}
	line := fmt.Sprintf("case %s: takeover median %v max %v over %d; %d/%d acked, %d dead letters, %d dead_lettered notices; %d connections, epochs %v; %d first deliveries, %d marked repeats received; gateway redeliveries %.0f (metrics, all nodes) / %d (view of node %d, streaming %v), difference %d (%s); unmarked %d, disorder %d, late %d",
		r.c.name, med.Round(time.Millisecond), maxT.Round(time.Millisecond), len(r.takeovers), acked, r.n, len(dl), r.dlNotices,
		len(r.conns), epochs, r.firsts, r.repeats, r.gwRedeliv, view.Redeliveries, view.node, view.Streaming, diff, bound,
		len(r.unmarked), len(r.disorder), len(r.late))
	r.t.Log(line)
	appendReport(r.t, EnvFaultReport, "TestDurableFaults: "+line)
	for _, c := range r.conns[:min(len(r.conns), 12)] {
		r.t.Logf("case %s:   connection %d: node %d epoch %s, %d events (%d read after its node froze), %s", r.c.name, c.k, r.fc.index(c.node), c.epoch, c.events, c.afterFreeze, c.why)
	}
}

// checkDeadLetters asserts the dead-letter run: exactly the never-acked session's events, each with
// attempts = max_attempts, each received max_attempts times by the consumer.
func (r *faultRun) checkDeadLetters(dl map[string]int) {
	want := map[string]bool{}
	for i := r.c.neverAck; i < r.n; i += faultSessions {
		want[fmt.Sprintf("evt_%s_%04d", faultSession(r.c, r.c.neverAck), i)] = true
	}
	var missing, extra, early, unseen []string
	for id := range want {
		if _, ok := dl[id]; !ok {
			missing = append(missing, id)
		}
	}
	for id, attempts := range dl {
		switch {
		case !want[id]:
			extra = append(extra, id)
		case attempts != faultAttempts:
			early = append(early, fmt.Sprintf("%s after %d attempts", id, attempts))
		case r.seen[id] < faultAttempts:
			unseen = append(unseen, fmt.Sprintf("%s received %d times", id, r.seen[id]))
		}
	}
	if len(missing)+len(extra)+len(early)+len(unseen) > 0 {
		r.fail("dead letters: %d wanted, %d found; %d missing %v, %d not of the session %v, %d with attempts != %d %v, %d received fewer than %d times %v",
			len(want), len(dl), len(missing), head(missing), len(extra), head(extra), len(early), faultAttempts, head(early),
			len(unseen), faultAttempts, head(unseen))
	}
	line := fmt.Sprintf("case %s: %d dead letters of the never-acked session %s (%d events), each with %d attempts: %v",
		r.c.name, len(dl), faultSession(r.c, r.c.neverAck), len(want), faultAttempts, len(missing)+len(extra)+len(early) == 0)
	r.t.Log(line)
	appendReport(r.t, EnvFaultReport, "TestDurableFaultDeadLetters: "+line)
}

func head(s []string) []string {
	slices.Sort(s)
	return s[:min(3, len(s))]
}

func firstKeys(m map[string]int) []string {
	var out []string
	for id := range m {
		out = append(out, id)
	}
	return head(out)
}

// deadLetters reads the tenant's dead-letter topic from the start to its current end and returns the
// dead letters of subscription subID: original event id -> attempts. A topic not created yet holds none.
func (fc *faultCluster) deadLetters(ctx context.Context, subID string) (map[string]int, error) {
	topic := fc.prefix + ".default.events.deadletter"
	cl, err := kgo.NewClient(kgo.SeedBrokers(fc.b.Seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	want := map[int32]int64{}
	for _, o := range ends[topic] {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return out, nil
		}
		if o.Err != nil {
			return nil, o.Err
		}
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	}
	if len(want) == 0 {
		return out, nil
	}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read %s: %w", topic, ctx.Err())
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			if end, ok := want[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(want, rec.Partition)
			}
			var d struct {
				Payload struct {
					Original string `json:"original_event_id"`
					Sub      string `json:"subscription_id"`
					Attempts int    `json:"attempts"`
				} `json:"payload"`
			}
			if json.Unmarshal(rec.Value, &d) == nil && d.Payload.Sub == subID {
				out[d.Payload.Original] = d.Payload.Attempts
			}
		}
	}
	return out, nil
}
