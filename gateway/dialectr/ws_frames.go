package dialectr

import (
	"encoding/json"

	"github.com/aep-gateway/aep-gateway/aep"
)

// WebSocket frames of AEP-0003 §2, §4, §6.5: connection-scoped messages
// whose type has no dot. Events (types with a dot) are sent and received as
// their own bytes.

// inFrame is what the relay reads of any incoming text message.
type inFrame struct {
	Type string `json:"type"`

	// hello
	Versions []string `json:"versions"`
	Role     string   `json:"role"`
	Identity *struct {
		Agent    string `json:"agent"`
		Instance string `json:"instance"`
	} `json:"identity"`
	Capabilities json.RawMessage `json:"capabilities"`

	// subscribe, unsubscribe
	ID      json.RawMessage `json:"id"`
	Filter  json.RawMessage `json:"filter"`
	From    json.RawMessage `json:"from"`
	Capture json.RawMessage `json:"capture"`

	// ping
	T json.RawMessage `json:"t"`
}

// Roles of hello (§4 rule 2).
const (
	roleEmitter  = "emitter"
	roleConsumer = "consumer"
	roleBoth     = "both"
)

// Capabilities is the capability object of the relay's hello (AEP-0003
// §4), which the discovery document reuses (§3.4). It marshals to JSON.
type Capabilities struct {
	Filters      []string       `json:"filters"`
	Capture      []string       `json:"capture"`
	Replay       ReplayCaps     `json:"replay"`
	Control      *ControlCaps   `json:"control,omitempty"`
	Roster       struct{}       `json:"roster"`
	Experimental map[string]any `json:"experimental"`
}

// declared is what a connection's hello declared, relayed verbatim in
// roster entries (AEP-0003 §4.1 rule 4).
type declared struct {
	Agent, Instance string
	Control, Emits  json.RawMessage // nil when not declared
}

// ReplayCaps is capabilities.replay: the advertised replay depth and
// whether from "all" is implemented.
type ReplayCaps struct {
	Buffer int  `json:"buffer"`
	All    bool `json:"all"`
}

// ControlCaps is capabilities.control: the relay routes commands
// (AEP-0004 §4) and accepts none itself.
type ControlCaps struct {
	Accepts []string `json:"accepts"`
}

type helloFrame struct {
	Type         string            `json:"type"`
	Versions     []string          `json:"versions"`
	Role         string            `json:"role"`
	Identity     map[string]string `json:"identity"`
	Capabilities Capabilities      `json:"capabilities"`
}

// Capabilities returns what this relay declares in hello and what the
// discovery document should advertise (AEP-0003 §3.4 reuses the shape):
// filters, capture levels it delivers at, replay depth and replay-all, the
// roster frame, and control routing when the bindings are authenticated.
func (rl *Relay) Capabilities() Capabilities {
	var control *ControlCaps
	if rl.cfg.Authenticated {
		control = &ControlCaps{Accepts: []string{}}
	}
	return Capabilities{
		Filters:      []string{"attr-match"},
		Capture:      []string{aep.CaptureNone.String(), aep.CaptureMetadata.String(), aep.CaptureRedacted.String(), aep.CaptureFull.String()},
		Replay:       ReplayCaps{Buffer: max(rl.cfg.ReplayBuffer, 0), All: true},
		Control:      control,
		Experimental: map[string]any{},
	}
}

type errorFrame struct {
	Type     string   `json:"type"`
	ID       string   `json:"id,omitempty"`
	Code     string   `json:"code"`
	Detail   string   `json:"detail"`
	Versions []string `json:"versions,omitempty"`
	// Event is the id of a refused event from an emitter (gateway
	// extension: AEP-0003 defines no per-event answer on WS).
	Event string `json:"event,omitempty"`
}

type idFrame struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

type earliest struct {
	Epoch int64 `json:"epoch"`
	Seq   int64 `json:"seq"`
}

type exhaustedFrame struct {
	Type     string    `json:"type"`
	Sub      string    `json:"sub"`
	Session  string    `json:"session"`
	Earliest *earliest `json:"earliest"`
}

type deliveredPos struct {
	Sub     string `json:"sub"`
	Session string `json:"session"`
	Epoch   int64  `json:"epoch"`
	Seq     int64  `json:"seq"`
}

type closingFrame struct {
	Type      string         `json:"type"`
	Reason    string         `json:"reason"`
	Delivered []deliveredPos `json:"delivered"`
}

type pingFrame struct {
	Type string          `json:"type"`
	T    json.RawMessage `json:"t,omitempty"`
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // every frame type above marshals; never client input
		return []byte(`{"type":"error","code":"internal","detail":"frame encoding failed"}`)
	}
	return b
}
