package dialectr

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// The AEP-0004 control profile on /socket. A command (aep.IsCommandR) from
// any connection is checked on the sender's node: the binding must be
// authenticated (Config.Authenticated), the tenant's ControlPolicy must
// allow the sender, exactly one live claim of the addressed session must
// exist cluster-wide (presence.go) and it must have declared the type in
// control.accepts. A refusal is a connection-scoped error frame with cause =
// the command's id (no-route, ambiguous, unsupported, unauthorized,
// invalid-event), never an event. A routed command is written to the
// session's history through the ingest (once per (source, id) this node
// has routed), then to the tenant's control topic with the claim's key in
// the header aep-claim; the node holding that claim writes the command's
// bytes, unchanged, to the claimant's connection. Acks and outcomes are the
// target's ordinary session events: the sender sees them on any
// subscription to the session.

// headerClaim names the claim a control record is for.
const headerClaim = "aep-claim"

// ControlPolicy decides who may command whom, per tenant (AEP-0004 §4.3).
// The zero value lets every authenticated sender of a tenant command every
// live claim of that tenant (tenants never see each other's claims).
type ControlPolicy struct {
	// Tenants maps a tenant to its rule; tenants not listed get Default.
	Tenants map[string]ControlRule
	Default ControlRule
}

// ControlRule is one tenant's rule.
type ControlRule struct {
	// Off refuses every command of the tenant (unauthorized).
	Off bool
	// Senders, when not empty, lists the sender agents (the command's
	// envelope agent) allowed to command; others are refused
	// (unauthorized). Empty: every sender.
	Senders []string
}

// ParseControlPolicy parses "rule[;tenant=rule...]" where rule is any,
// off, or agents:a|b|c; a bare first rule (or tenant "*") is the default.
func ParseControlPolicy(s string) (ControlPolicy, error) {
	var p ControlPolicy
	for i, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, rule, ok := strings.Cut(part, "=")
		if !ok {
			if i != 0 {
				return p, fmt.Errorf("control policy %q: want tenant=rule", part)
			}
			name, rule = "*", part
		}
		r, err := parseControlRule(rule)
		if err != nil {
			return p, fmt.Errorf("control policy for %s: %w", name, err)
		}
		if name == "*" {
			p.Default = r
			continue
		}
		if p.Tenants == nil {
			p.Tenants = map[string]ControlRule{}
		}
		p.Tenants[name] = r
	}
	return p, nil
}

func parseControlRule(s string) (ControlRule, error) {
	switch {
	case s == "any":
		return ControlRule{}, nil
	case s == "off":
		return ControlRule{Off: true}, nil
	case strings.HasPrefix(s, "agents:"):
		list := strings.Split(strings.TrimPrefix(s, "agents:"), "|")
		if slices.Contains(list, "") {
			return ControlRule{}, fmt.Errorf("agents: lists agent names separated by |, got %q", s)
		}
		return ControlRule{Senders: list}, nil
	}
	return ControlRule{}, fmt.Errorf("rule %q: want any, off or agents:a|b", s)
}

// allows reports whether sender agent may command in tenant.
func (p ControlPolicy) allows(tenant, agent string) bool {
	r, ok := p.Tenants[tenant]
	if !ok {
		r = p.Default
	}
	if r.Off {
		return false
	}
	return len(r.Senders) == 0 || slices.Contains(r.Senders, agent)
}

// controlErrorFrame is the relay-behalf refusal (AEP-0004 §4.2).
type controlErrorFrame struct {
	Type   string `json:"type"`
	Cause  string `json:"cause"`
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
}

// refuseCommand answers the sender's connection. Reader only.
func (c *wsConn) refuseCommand(id, code, detail string) {
	c.send(marshal(controlErrorFrame{Type: "error", Cause: id, Code: code, Detail: detail}))
}

// command routes one command (see the file comment). Reader only.
func (c *wsConn) command(data []byte, id string) {
	rl := c.rl
	if !rl.cfg.Authenticated {
		c.refuseCommand(id, aep.CodeRUnauthorized, "control flows only on authenticated bindings (AEP-0004 §4.1); this gateway runs without authentication")
		return
	}
	a, err := aep.ParseAs(aep.DialectR, data, rl.cfg.Limits)
	if err != nil {
		e := aep.AsError(err)
		code, msg := aep.CodeRInvalidEvent, err.Error()
		if e != nil {
			code, msg = e.Code, e.Message
		}
		c.refuseCommand(id, code, msg)
		return
	}
	if !rl.cfg.ControlPolicy.allows(c.tenant.String(), a.Agent) {
		c.refuseCommand(id, aep.CodeRUnauthorized, fmt.Sprintf("the control policy of this tenant does not let %q send commands", a.Agent))
		return
	}
	// The principal's own rights come on top of the tenant's policy: the
	// control scope, and the agent it commands as among its emit: scopes
	// (a command is an event the principal publishes).
	if who := c.tenant.Principal(); who.Restricted() && (!who.MayControl() || !who.MayEmitAs(a.Agent)) {
		c.refuseCommand(id, aep.CodeRUnauthorized, fmt.Sprintf("principal %q may not send commands as %q (it needs the control scope and an emit: scope covering the agent)", who.ID, a.Agent))
		return
	}
	p, err := rl.presenceOf(c.ctx, c.tenant)
	if err != nil {
		c.log.Error().Err(err).Msg("dialectr: presence unavailable")
		c.refuseCommand(id, aep.CodeRNoRoute, "the claims of this tenant cannot be read now; retry with the same id")
		return
	}
	claims := p.snapshot(a.Session)
	switch {
	case len(claims) == 0:
		c.refuseCommand(id, aep.CodeRNoRoute, "no connected emitter claims session "+trunc(a.Session))
		return
	case len(claims) > 1:
		c.refuseCommand(id, aep.CodeRAmbiguous, fmt.Sprintf("%d live connections claim session %s; the relay never picks one", len(claims), trunc(a.Session)))
		return
	case claims[0].rec.NoControl:
		c.refuseCommand(id, aep.CodeRUnauthorized, "the claimant of session "+trunc(a.Session)+" is connected through an unauthenticated binding; control never flows there (AEP-0004 §4.1)")
		return
	case !claims[0].accepted(a.Type):
		c.refuseCommand(id, aep.CodeRUnsupported, fmt.Sprintf("the claimant of session %s did not declare %s in control.accepts", trunc(a.Session), a.Type))
		return
	}
	target := claims[0]
	// Persist once per (source, id) this node routed; a retransmit is
	// forwarded again (the target re-acks it) but not written twice.
	if rl.routedFirst(c.tenant.String(), a.Source, a.ID) {
		res := rl.cfg.Ingest(c.ctx, c.tenant, [][]byte{bytes.Clone(data)})
		if len(res) == 1 && !res[0].Accepted() {
			rl.forgetRouted(c.tenant.String(), a.Source, a.ID)
			if res[0].Err != nil {
				c.refuseCommand(id, res[0].Err.Code, res[0].Err.Message)
				return
			}
			c.log.Warn().Err(res[0].WriteErr).Msg("dialectr: command not written")
			c.refuseCommand(id, codeUnavailable, "the event log did not take the command; send it again with the same id")
			return
		}
	}
	rec := &kgo.Record{Topic: p.ctlTopic, Key: []byte(a.Session), Value: bytes.Clone(data),
		Headers: []kgo.RecordHeader{{Key: headerClaim, Value: []byte(target.key)}}}
	if err := p.cl.ProduceSync(c.ctx, rec).FirstErr(); err != nil {
		c.log.Warn().Err(err).Msg("dialectr: command not routed")
		c.refuseCommand(id, codeUnavailable, "the command could not be routed; send it again with the same id")
	}
}

// deliver writes a routed command to the local claimant it names; a
// command for a claim this node does not hold is another node's.
func (p *presence) deliver(ctx context.Context, r *kgo.Record) {
	var key string
	for _, h := range r.Headers {
		if h.Key == headerClaim {
			key = string(h.Value)
		}
	}
	p.mu.Lock()
	c := p.local[key]
	p.mu.Unlock()
	if c == nil || !p.rl.cfg.Authenticated {
		return // another node's claim; or never on an unauthenticated binding
	}
	sctx, cancel := context.WithTimeout(ctx, commandSendWait)
	defer cancel()
	if !c.conn.conn.SendCtx(sctx, transport.Item{Msg: r.Value}) && ctx.Err() == nil {
		p.rl.cfg.Logger.Warn().Str("session", c.rec.Session).Msg("dialectr: command not delivered: the target's queue stayed full")
	}
}

// routedKey is a command this node routed.
type routedKey struct{ tenant, source, id string }

// maxRouted bounds the remembered routed commands; the oldest half is
// forgotten when it is reached.
const maxRouted = 1 << 14

// routedFirst records (tenant, source, id) and reports whether it is new.
func (rl *Relay) routedFirst(tenant, source, id string) bool {
	k := routedKey{tenant, source, id}
	rl.routedMu.Lock()
	defer rl.routedMu.Unlock()
	if _, ok := rl.routed[k]; ok {
		return false
	}
	if len(rl.routed) >= maxRouted {
		rl.routedOld, rl.routed = rl.routed, map[routedKey]struct{}{}
	}
	if _, ok := rl.routedOld[k]; ok {
		return false
	}
	rl.routed[k] = struct{}{}
	return true
}

func (rl *Relay) forgetRouted(tenant, source, id string) {
	rl.routedMu.Lock()
	delete(rl.routed, routedKey{tenant, source, id})
	rl.routedMu.Unlock()
}

// rosterEntry is one entry of a roster reply (AEP-0003 §4.1 rule 4).
type rosterEntry struct {
	Session  string          `json:"session"`
	Agent    string          `json:"agent,omitempty"`
	Instance string          `json:"instance,omitempty"`
	Control  json.RawMessage `json:"control,omitempty"`
	Emits    json.RawMessage `json:"emits,omitempty"`
}

type rosterFrame struct {
	Type    string        `json:"type"`
	ID      string        `json:"id"`
	Entries []rosterEntry `json:"entries"`
}

// roster answers a roster request with the tenant's live claims,
// cluster-wide. Reader only.
func (c *wsConn) roster(f *inFrame) {
	var id string
	if err := json.Unmarshal(f.ID, &id); err != nil || id == "" || len(id) > maxSubID {
		c.refuse("", invalid("roster.id must be a non-empty string of at most %d bytes", maxSubID))
		return
	}
	if c.role == roleEmitter {
		c.refuse(id, &reqError{Code: aep.CodeRUnauthorized, Detail: "roster is answered on consumer connections; this one said hello as an emitter"})
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, presenceStartWait)
	defer cancel()
	p, err := c.rl.presenceOf(ctx, c.tenant)
	if err != nil {
		c.log.Error().Err(err).Msg("dialectr: presence unavailable")
		c.refuse(id, &reqError{Code: aep.CodeRLimitExceeded, Detail: "the claims of this tenant cannot be read now; ask again later"})
		return
	}
	claims := p.snapshot("")
	if len(claims) > MaxRosterEntries {
		c.refuse(id, &reqError{Code: aep.CodeRLimitExceeded, Detail: fmt.Sprintf("%d live claims; a roster lists at most %d", len(claims), MaxRosterEntries)})
		return
	}
	if n := rosterBytes(claims); n > maxRosterBytes {
		c.refuse(id, &reqError{Code: aep.CodeRLimitExceeded, Detail: fmt.Sprintf("the roster of %d live claims would take about %d bytes; a roster is at most %d", len(claims), n, maxRosterBytes)})
		return
	}
	rf := rosterFrame{Type: "roster", ID: id, Entries: make([]rosterEntry, 0, len(claims))}
	for _, cl := range claims {
		rf.Entries = append(rf.Entries, cl.rec.rosterEntry)
	}
	c.send(marshal(rf))
}

// claimSession makes this emitter connection a live claimant of session
// (its first MaxClaimsPerConn sessions). Reader only.
func (c *wsConn) claimSession(session string) {
	if session == "" || c.role == roleConsumer {
		return
	}
	if _, ok := c.claimed[session]; ok || len(c.claimed) >= MaxClaimsPerConn {
		return
	}
	if len(session) > MaxSessionClaimBytes {
		c.log.Debug().Int("bytes", len(session)).Msg("dialectr: session id too long to claim; the event was written")
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, presenceStartWait)
	defer cancel()
	p, err := c.rl.presenceOf(ctx, c.tenant)
	if err != nil {
		c.log.Error().Err(err).Str("session", session).Msg("dialectr: claim not recorded")
		return
	}
	c.claimed[session] = struct{}{}
	c.pres = p
	p.add(c, session)
}

// releaseClaims deletes the connection's claims when it ends.
func (c *wsConn) releaseClaims() {
	if c.pres == nil || len(c.claimed) == 0 {
		return
	}
	sessions := make([]string, 0, len(c.claimed))
	for s := range c.claimed {
		sessions = append(sessions, s)
	}
	c.pres.remove(c, sessions)
}

// stopPresences stops every tenant's presence (Shutdown).
func (rl *Relay) stopPresences(entries map[string]*presenceEntry) {
	for _, pe := range entries {
		<-pe.ready
		if pe.p != nil {
			pe.p.stop()
		}
	}
}
