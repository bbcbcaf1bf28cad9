package aep

// Dialect names which of the two AEP families an event belongs to.
type Dialect uint8

const (
	// DialectUnknown is the zero value: no version attribute was recognised.
	DialectUnknown Dialect = iota
	// DialectR is agenteventprotocol.io AEP (version attribute "aep").
	DialectR
	// DialectD is axisrobo AEP 0.1 (version attribute "aep_version").
	DialectD
)

// String returns the dialect's wire name, as carried in the aep-dialect
// Kafka header: "R", "D", or "" for DialectUnknown.
func (d Dialect) String() string {
	switch d {
	case DialectR:
		return "R"
	case DialectD:
		return "D"
	}
	return ""
}

// ParseDialect is the inverse of Dialect.String.
func ParseDialect(s string) Dialect {
	switch s {
	case "R":
		return DialectR
	case "D":
		return DialectD
	}
	return DialectUnknown
}

// Attrs are the neutral routing attributes of one event, shared by both
// dialects. They ride in Kafka record headers so that partitioning, filtering
// and delivery never parse the event value. A field that the event does not
// carry is the empty string (or Has* false); no defaults are filled in here:
// defaults (R severity "info", capture "metadata", epoch 0) are the
// consumer's business, because a relay must forward what it received.
type Attrs struct {
	Dialect Dialect

	ID     string // both: id
	Type   string // both: type
	Source string // both: source

	Session      string // R session, D session_id
	Conversation string // D conversation_id
	Task         string // D task_id
	Target       string // D target
	Correlation  string // D correlation_id
	Causation    string // D causation_id
	DeliveryMode string // D delivery.mode of an event relayed from an upstream hop
	Topic        string // D topic

	Agent   string // R agent
	Subject string // R subject
	Run     string // R run
	Step    string // R step
	Cause   string // R cause: the id of the event that caused this one

	Severity string // R severity (one of debug..critical) or ""
	Capture  string // R capture (none, metadata, redacted, full) or ""

	Epoch    int64 // R epoch; meaningful when HasEpoch
	HasEpoch bool
	Seq      int64 // R seq; meaningful when HasSeq
	HasSeq   bool

	// Claims are the D envelope's top-level members that claim an identity
	// the transport's credential must back (tenant_id, authorization); the
	// ingest path checks them. Set by parsing, never by headers.
	Claims Claims

	// Ext holds dialect R extension attributes (top-level members outside
	// the core set), in document order, each with its raw JSON value.
	Ext []Ext
}

// Ext is one extension attribute: its name and its value as raw JSON bytes
// (a string value keeps its quotes), so filters can compare JSON values
// exactly without coercion.
type Ext struct {
	Name  string
	Value []byte
}

// Claims is a set of identity-claiming envelope members (Attrs.Claims).
type Claims uint8

// The claims of a dialect D envelope.
const (
	ClaimTenantID      Claims = 1 << iota // tenant_id
	ClaimAuthorization                    // authorization
)
