package dialectr

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// Presence: the live emitter claims of a tenant, cluster-wide. Every node
// publishes the claims of its own connections to the tenant's compacted
// presence topic (<events topic>.presence, one partition), one record per
// claim keyed by "<session>\x00<node>/<connection>", renewed every
// PresenceTTL/3 with a new expiry and deleted (tombstone) when the
// connection ends. Every node that needs the tenant's claims (a roster, a
// command, a claim of its own) follows that topic from its start. A claim
// whose node died expires at its expiry. Commands for a claim go through
// the tenant's control topic (<events topic>.control, one partition), read
// by the nodes holding claims of the tenant (control.go). Nodes never talk
// to each other directly.

// Defaults of presence.
const (
	DefaultPresenceTTL = 15 * time.Second
	// MaxClaimsPerConn bounds the sessions one emitter connection claims;
	// events of further sessions are written but not claimed.
	MaxClaimsPerConn = 64
	// MaxRosterEntries bounds a roster reply.
	MaxRosterEntries = 4096
	// MaxIdentityBytes bounds hello.identity.agent and .instance each.
	MaxIdentityBytes = 256
	// MaxSessionClaimBytes bounds the session id of a claim.
	MaxSessionClaimBytes = 256
	// maxDeclBytes bounds a declared control or emits block relayed in
	// the roster.
	maxDeclBytes = 4 << 10
	// presenceStartWait bounds how long a tenant's presence start waits to
	// have read the presence topic to its end.
	presenceStartWait = 10 * time.Second
	// staleAfter is how many TTLs past its expiry a claim is deleted from
	// the presence topic by the node that notices.
	staleAfter = 4
	// commandSendWait bounds how long a command waits for room in its
	// target connection's outbound queue.
	commandSendWait = 2 * time.Second
)

// maxRosterBytes bounds a roster reply (a var for tests).
var maxRosterBytes = 4 << 20

// maxClaimRecordBytes bounds a presence record taken from the presence
// topic: a claim within the bounds above is well under it.
const maxClaimRecordBytes = 16 << 10

// rosterEntryOverhead is about what an entry's JSON adds to its strings.
const rosterEntryOverhead = 64

// rosterBytes is about the size of a roster reply listing claims, counted
// before it is built.
func rosterBytes(claims []*claim) int {
	n := 0
	for _, cl := range claims {
		e := &cl.rec.rosterEntry
		n += rosterEntryOverhead + len(e.Session) + len(e.Agent) + len(e.Instance) + len(e.Control) + len(e.Emits)
	}
	return n
}

// claimRecord is the value of a presence record: one live claim.
type claimRecord struct {
	rosterEntry        // what the roster relays of it
	Node        string `json:"node"`
	Expires     int64  `json:"expires"` // unix milliseconds
	// NoControl: the claimant's node runs without authentication, so no
	// command may reach it (AEP-0004 §4.1).
	NoControl bool `json:"no_control,omitempty"`
}

// claim is a claim known to this node: its own (conn set) or another
// node's (from the presence topic).
type claim struct {
	key     string
	rec     claimRecord
	accepts []string // declared control.accepts; nil when none declared
	conn    *wsConn  // local claims only
}

// accepted reports whether the claim declared typ in control.accepts.
func (cl *claim) accepted(typ string) bool { return slices.Contains(cl.accepts, typ) }

// declaredAccepts reads control.accepts from a declared control block.
func declaredAccepts(control json.RawMessage) []string {
	if len(control) == 0 {
		return nil
	}
	var c struct {
		Accepts []string `json:"accepts"`
	}
	if json.Unmarshal(control, &c) != nil || c.Accepts == nil {
		return []string{}
	}
	return c.Accepts
}

// presence is one tenant's claims on this node and its follower of the
// presence and control topics. It is created once per tenant and node,
// on first use, and stopped by Relay.Shutdown.
type presence struct {
	rl                  *Relay
	tenant              tenant.Tenant
	presTopic, ctlTopic string
	cl                  *kgo.Client

	cancel context.CancelFunc
	done   chan struct{} // the follower and the renewer ended

	mu     sync.Mutex
	local  map[string]*claim // by key
	remote map[string]*claim // by key, other nodes'
}

// presenceEntry is a tenant's presence while it starts.
type presenceEntry struct {
	ready chan struct{}
	p     *presence
	err   error
}

// newNodeID is a random node id: claims of a restarted process are new.
func newNodeID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "node-" + hex.EncodeToString(b[:])
}

// presenceOf returns the tenant's presence, starting it on first use. A
// failed start is forgotten so a later call retries.
func (rl *Relay) presenceOf(ctx context.Context, tn tenant.Tenant) (*presence, error) {
	rl.mu.Lock()
	if rl.closed {
		rl.mu.Unlock()
		return nil, ErrClosed
	}
	pe, ok := rl.presences[tn.String()]
	if !ok {
		pe = &presenceEntry{ready: make(chan struct{})}
		rl.presences[tn.String()] = pe
		rl.mu.Unlock()
		pe.p, pe.err = rl.startPresence(ctx, tn)
		close(pe.ready)
		if pe.err != nil {
			rl.mu.Lock()
			if rl.presences[tn.String()] == pe {
				delete(rl.presences, tn.String())
			}
			rl.mu.Unlock()
		}
		return pe.p, pe.err
	}
	rl.mu.Unlock()
	select {
	case <-pe.ready:
		return pe.p, pe.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startPresence creates the tenant's presence and control topics if
// needed, reads the presence topic to its end, and starts following both.
func (rl *Relay) startPresence(ctx context.Context, tn tenant.Tenant) (*presence, error) {
	events := rl.cfg.Naming.Events(tn.String())
	p := &presence{
		rl: rl, tenant: tn, presTopic: events + ".presence", ctlTopic: events + ".control",
		local: map[string]*claim{}, remote: map[string]*claim{}, done: make(chan struct{}),
	}
	adminCl, err := kgo.NewClient(rl.cfg.ClientOpts...)
	if err != nil {
		return nil, fmt.Errorf("dialectr: presence client: %w", err)
	}
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)
	rf := rl.cfg.ReplicationFactor
	if rf == 0 {
		rf = -1
	}
	if err := createTopic(ctx, adm, p.presTopic, rf, map[string]*string{"cleanup.policy": ptr("compact")}); err != nil {
		return nil, err
	}
	retention := strconv.FormatInt(time.Hour.Milliseconds(), 10)
	if err := createTopic(ctx, adm, p.ctlTopic, rf, map[string]*string{"cleanup.policy": ptr("delete"), "retention.ms": &retention}); err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, p.presTopic, p.ctlTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("dialectr: presence end offsets: %w", err)
	}
	presEnd, _ := ends.Lookup(p.presTopic, 0)
	ctlEnd, _ := ends.Lookup(p.ctlTopic, 0)
	opts := append(append([]kgo.Opt(nil), rl.cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			p.presTopic: {0: kgo.NewOffset().AtStart()},
			p.ctlTopic:  {0: kgo.NewOffset().At(ctlEnd.Offset)}, // commands from now on
		}),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	if p.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("dialectr: presence client: %w", err)
	}
	fctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	caughtUp := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.follow(fctx, presEnd.Offset, caughtUp) }()
	go func() { defer wg.Done(); p.renew(fctx) }()
	go func() { wg.Wait(); close(p.done) }()
	wait, stop := context.WithTimeout(ctx, presenceStartWait)
	defer stop()
	select {
	case <-caughtUp:
		return p, nil
	case <-wait.Done():
		p.stop()
		return nil, fmt.Errorf("dialectr: presence topic %s not read to its end: %w", p.presTopic, wait.Err())
	}
}

func ptr(s string) *string { return &s }

// createTopic creates a one-partition topic with replication factor rf
// (-1: the broker's default); an existing topic is fine.
func createTopic(ctx context.Context, adm *kadm.Client, topic string, rf int16, configs map[string]*string) error {
	res, err := adm.CreateTopic(ctx, 1, rf, configs, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("dialectr: create topic %s: %w", topic, err)
	}
	return nil
}

// stop ends the follower and the renewer, deletes this node's claims
// (best effort, bounded) and closes the client.
func (p *presence) stop() {
	p.cancel()
	<-p.done
	p.mu.Lock()
	keys := make([]string, 0, len(p.local))
	for k := range p.local {
		keys = append(keys, k)
	}
	p.local = map[string]*claim{}
	p.mu.Unlock()
	if len(keys) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, k := range keys {
			p.cl.Produce(ctx, &kgo.Record{Topic: p.presTopic, Key: []byte(k)}, nil)
		}
		_ = p.cl.Flush(ctx)
		cancel()
	}
	p.cl.Close()
}

// follow reads the presence topic (from its start) and the control topic
// (from the start moment) until ctx ends; caughtUp closes once the
// presence topic was read up to presEnd.
func (p *presence) follow(ctx context.Context, presEnd int64, caughtUp chan struct{}) {
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			close(caughtUp)
		}
	}
	if presEnd <= 0 {
		signal()
	}
	for {
		fs := p.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, part int32, err error) {
			p.rl.cfg.Logger.Warn().Err(err).Str("topic", t).Msg("dialectr: presence fetch")
		})
		fs.EachRecord(func(r *kgo.Record) {
			switch r.Topic {
			case p.presTopic:
				p.apply(r)
				if r.Offset+1 >= presEnd {
					signal()
				}
			case p.ctlTopic:
				p.deliver(ctx, r)
			}
		})
	}
}

// apply records another node's claim or its deletion.
func (p *presence) apply(r *kgo.Record) {
	key := string(r.Key)
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Value == nil {
		delete(p.remote, key)
		return
	}
	if len(r.Value) > maxClaimRecordBytes {
		return // not written by a node that keeps the bounds
	}
	var rec claimRecord
	if err := json.Unmarshal(r.Value, &rec); err != nil || rec.Session == "" || len(rec.Session) > MaxSessionClaimBytes ||
		len(rec.Agent) > MaxIdentityBytes || len(rec.Instance) > MaxIdentityBytes {
		return
	}
	if _, mine := p.local[key]; mine && rec.Node == p.rl.nodeID {
		return // this process's own claims are p.local
	}
	// A claim under this node's id that this process does not hold is an
	// earlier process's (a restarted pod keeps its name as --node-id): it
	// is held like any other node's, expires and is deleted when stale.
	p.remote[key] = &claim{key: key, rec: rec, accepts: declaredAccepts(rec.Control)}
}

// renew republishes this node's claims with a new expiry every third of
// the TTL, and deletes claims whose node stopped renewing them long ago
// (staleAfter TTLs past their expiry: a node that died without deleting
// its claims), so that the compacted topic does not keep them forever.
func (p *presence) renew(ctx context.Context) {
	t := time.NewTicker(p.rl.cfg.PresenceTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		claims := make([]*claim, 0, len(p.local))
		for _, c := range p.local {
			claims = append(claims, c)
		}
		stale := time.Now().Add(-staleAfter * p.rl.cfg.PresenceTTL).UnixMilli()
		var dead []string
		for k, c := range p.remote {
			if c.rec.Expires < stale {
				dead = append(dead, k)
				delete(p.remote, k)
			}
		}
		p.mu.Unlock()
		for _, c := range claims {
			p.publish(ctx, c)
		}
		for _, k := range dead {
			p.cl.Produce(ctx, &kgo.Record{Topic: p.presTopic, Key: []byte(k)}, nil)
		}
	}
}

// publish writes a claim with a fresh expiry.
func (p *presence) publish(ctx context.Context, c *claim) {
	rec := c.rec
	rec.Expires = time.Now().Add(p.rl.cfg.PresenceTTL).UnixMilli()
	v, err := json.Marshal(rec)
	if err != nil {
		return
	}
	p.cl.Produce(ctx, &kgo.Record{Topic: p.presTopic, Key: []byte(c.key), Value: v}, func(_ *kgo.Record, err error) {
		if err != nil && ctx.Err() == nil {
			p.rl.cfg.Logger.Warn().Err(err).Str("session", rec.Session).Msg("dialectr: claim not published")
		}
	})
}

// add claims session for conn and publishes the claim.
func (p *presence) add(conn *wsConn, session string) {
	key := session + "\x00" + p.rl.nodeID + "/" + strconv.FormatUint(conn.id, 10)
	p.mu.Lock()
	if _, ok := p.local[key]; ok {
		p.mu.Unlock()
		return
	}
	c := &claim{key: key, conn: conn, accepts: declaredAccepts(conn.decl.Control), rec: claimRecord{
		rosterEntry: rosterEntry{
			Session: session, Agent: conn.decl.Agent, Instance: conn.decl.Instance,
			Control: conn.decl.Control, Emits: conn.decl.Emits,
		},
		Node: p.rl.nodeID, NoControl: !p.rl.cfg.Authenticated,
	}}
	p.local[key] = c
	delete(p.remote, key) // an earlier process's claim under the same key: this one replaces it
	p.mu.Unlock()
	p.publish(context.Background(), c)
}

// remove deletes conn's claims.
func (p *presence) remove(conn *wsConn, sessions []string) {
	ctx := context.Background()
	for _, s := range sessions {
		key := s + "\x00" + p.rl.nodeID + "/" + strconv.FormatUint(conn.id, 10)
		p.mu.Lock()
		_, ok := p.local[key]
		delete(p.local, key)
		p.mu.Unlock()
		if ok {
			p.cl.Produce(ctx, &kgo.Record{Topic: p.presTopic, Key: []byte(key)}, nil)
		}
	}
}

// snapshot returns the live claims of the tenant, cluster-wide, ordered by
// session then key; session "" means every session.
func (p *presence) snapshot(session string) []*claim {
	now := time.Now().UnixMilli()
	p.mu.Lock()
	out := make([]*claim, 0, len(p.local))
	for _, m := range []map[string]*claim{p.local, p.remote} {
		for _, c := range m {
			if (session == "" || c.rec.Session == session) && (c.conn != nil || c.rec.Expires > now) {
				out = append(out, c)
			}
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b *claim) int {
		return cmp.Or(cmp.Compare(a.rec.Session, b.rec.Session), cmp.Compare(a.key, b.key))
	})
	return out
}
