package dialectr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/ingest"
)

// maxSubID bounds a subscription id.
const maxSubID = 256

// handle acts on one text frame; false ends the read loop. Reader only.
func (c *wsConn) handle(data []byte) bool {
	// The type (and an event's id) first: an event is any JSON object
	// whose type has a dot, whatever its other members look like. Most
	// frames are an emitter's events, so they are told by a scan of the
	// top-level members; what the scan cannot tell alone (escaped or
	// case-folded names, commands) takes encoding/json as before.
	if c.helloDone {
		if id, ok := eventHead(data); ok {
			c.event(data, id)
			return true
		}
	}
	var head struct {
		Type string `json:"type"`
		ID   any    `json:"id"`
	}
	err := json.Unmarshal(data, &head)
	if err == nil && c.helloDone && strings.Contains(head.Type, ".") {
		id, _ := head.ID.(string)
		if aep.IsCommandR(head.Type) {
			c.pipe.Drain()
			c.command(data, id)
		} else {
			c.event(data, id)
		}
		return true
	}
	// Whatever else the relay answers comes after the answers to the
	// events read before it (a pong after their error frames).
	c.pipe.Drain()
	var f inFrame
	if err == nil {
		err = json.Unmarshal(data, &f)
	}
	if err != nil {
		if !c.helloDone {
			return c.refuseHello(aep.CodeRHelloRequired, "the first frame must be a hello JSON object", nil)
		}
		// Not a JSON object, or a frame whose members have the wrong
		// types: there is no closed-set code for it; ignored like an
		// unknown frame (docs/relay.md).
		c.log.Debug().Err(err).Msg("dialectr: unparseable websocket frame ignored")
		return true
	}
	if !c.helloDone {
		if f.Type != "hello" {
			return c.refuseHello(aep.CodeRHelloRequired, "the first frame must be hello (AEP-0003 §3.5)", nil)
		}
		return c.hello(&f)
	}
	switch f.Type {
	case "subscribe":
		c.subscribe(&f)
	case "unsubscribe":
		c.unsubscribe(&f)
	case "roster":
		c.roster(&f)
	case "ping":
		c.send(marshal(pingFrame{Type: "pong", T: f.T}))
	}
	// Everything else (pong, a second hello, closing, frames of later
	// revisions) is ignored (AEP-0003 §2).
	return true
}

// refuseHello sends an error frame and closes. Reader only.
func (c *wsConn) refuseHello(code, detail string, versions []string) bool {
	c.send(marshal(errorFrame{Type: "error", Code: code, Detail: detail, Versions: versions}))
	c.closeWith(websocket.StatusPolicyViolation, code)
	return false
}

// hello answers the client's hello (AEP-0003 §4): exactly one version from
// the intersection, in the client's order of preference.
func (c *wsConn) hello(f *inFrame) bool {
	supported := aep.SupportedVersions(aep.DialectR)
	var chosen string
	for _, v := range f.Versions {
		if slices.Contains(supported, v) {
			chosen = v
			break
		}
	}
	if chosen == "" {
		return c.refuseHello(aep.CodeRVersionUnsupported, "no version in common; this relay speaks "+strings.Join(supported, ", "), supported)
	}
	switch f.Role {
	case roleEmitter, roleConsumer, roleBoth:
	default:
		return c.refuseHello(aep.CodeRHelloRequired, `hello.role must be "emitter", "consumer" or "both"`, nil)
	}
	if f.Role != roleConsumer && (f.Identity == nil || f.Identity.Agent == "") {
		return c.refuseHello(aep.CodeRHelloRequired, "hello.identity.agent is required for emitters (AEP-0003 §4 rule 3)", nil)
	}
	if f.Identity != nil {
		for _, fld := range []struct{ name, v string }{{"agent", f.Identity.Agent}, {"instance", f.Identity.Instance}} {
			if len(fld.v) > MaxIdentityBytes {
				return c.refuseHello(aep.CodeRLimitExceeded, fmt.Sprintf("hello.identity.%s is %d bytes; at most %d", fld.name, len(fld.v), MaxIdentityBytes), nil)
			}
		}
	}
	c.helloDone, c.role = true, f.Role
	if f.Identity != nil {
		c.decl.Agent, c.decl.Instance = f.Identity.Agent, f.Identity.Instance
	}
	var caps struct {
		Control json.RawMessage `json:"control"`
		Emits   json.RawMessage `json:"emits"`
	}
	if json.Unmarshal(f.Capabilities, &caps) == nil { // capabilities are never a validation gate (§4 rule 4)
		c.decl.Control, c.decl.Emits = declBlock(caps.Control), declBlock(caps.Emits)
	}
	c.send(marshal(helloFrame{
		Type: "hello", Versions: []string{chosen}, Role: roleBoth,
		Identity:     map[string]string{"agent": "aep-gateway"},
		Capabilities: c.rl.Capabilities(),
	}))
	c.conn.Ready() // hello done: the connection may park between frames
	c.conn.StartHeartbeat()
	return true
}

// event writes an emitter's event through the gateway's ingest: queued on
// the connection's pipe, written with the events read while the write
// before it was in flight, in order (eventWritten answers). Reader only.
func (c *wsConn) event(data []byte, id string) {
	if c.role == roleConsumer || c.rl.cfg.Ingest == nil {
		c.pipe.Drain()
		c.send(marshal(errorFrame{Type: "error", Code: aep.CodeRUnauthorized, Detail: "this connection did not say hello as an emitter", Event: id}))
		return
	}
	if c.pipe == nil { // an emitter's first event: consumers never hold one
		c.pipe = ingest.NewPipe(ingest.PipeConfig{
			Func: c.rl.cfg.Ingest, Tenant: c.tenant, Context: c.ctx,
			Done: c.eventWritten, Go: c.conn.Run, Logger: c.log,
			Panicked: func() { c.closeNow(websocket.StatusInternalError, "internal_error") },
		})
	}
	c.pipe.Submit(bytes.Clone(data), id)
}

// eventWritten answers one event's outcome: a refused event gets an error
// frame naming it, an accepted one claims its session; the connection goes
// on. The pipe's worker, one event at a time.
func (c *wsConn) eventWritten(id string, r *ingest.Result) {
	switch {
	case r.Accepted():
		c.claimSession(r.Attrs.Session)
	case r.Err != nil && r.Err.Kind == aep.KindSyntax:
		// Not one JSON object: ignored like any unparseable frame
		// (docs/relay.md), whether or not a scan found a dotted type in it.
		c.log.Debug().Err(r.Err).Msg("dialectr: unparseable websocket frame ignored")
	case r.Err != nil:
		c.send(marshal(errorFrame{Type: "error", Code: r.Err.Code, Detail: r.Err.Message, Event: id}))
	case r.WriteErr != nil:
		c.log.Warn().Err(r.WriteErr).Msg("dialectr: websocket event not written")
		c.send(marshal(errorFrame{Type: "error", Code: codeUnavailable, Detail: "the event log did not take the event; send it again with the same id", Event: id}))
	}
}

// codeUnavailable answers an event the log could not take and a
// subscription the log could not serve (gateway extension: AEP-0003 has
// no code for a transient failure; docs/relay.md).
const codeUnavailable = "unavailable"

// declBlock keeps a declared capability block for the roster: absent,
// null or over maxDeclBytes is not relayed.
func declBlock(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" || len(raw) > maxDeclBytes {
		return nil
	}
	return bytes.Clone(raw)
}
