package aep

// Limits bound what one event may contain. A zero field means the documented
// default; a negative field is treated as zero (the default). Limits are
// checked while the event is scanned, so an event over a limit costs at most
// the bytes read up to the point where the limit was hit.
type Limits struct {
	// MaxEventBytes bounds the size of one event, in bytes as received
	// (default 1 MiB). The Kafka topic's max.message.bytes must exceed it
	// plus the routing headers.
	MaxEventBytes int
	// MaxDepth bounds the nesting depth of objects and arrays; the envelope
	// object itself is depth 1, so data/payload members start at depth 2
	// (default 64).
	MaxDepth int
	// MaxExtensions bounds the top-level members outside the dialect's core
	// set: R extension attributes (AEP-0001 §5.4) and D members the envelope
	// schema does not name (default 64).
	MaxExtensions int
	// MaxStringBytes bounds every top-level string of the envelope (member
	// names and string values of the envelope's own attributes, measured as
	// raw JSON bytes between the quotes) and the literal of a top-level
	// number. Strings inside data/payload, and a
	// D payload that is itself a string, are bounded only by MaxEventBytes
	// (default 4096).
	MaxStringBytes int
	// ValidatePayloads checks the data of a dialect R event whose type is
	// registered in AEP-0002 against the type's payload schema
	// (schemas/r, payload_r.go) and refuses a mismatch with invalid-event
	// naming the field (e.g. data.cost.currency). Off (false) by default: a
	// relay forwards payloads it does not understand. Unregistered types and
	// dialect D events are never checked.
	ValidatePayloads bool
}

// Default limits, used for zero fields of [Limits].
const (
	DefaultMaxEventBytes  = 1 << 20
	DefaultMaxDepth       = 64
	DefaultMaxExtensions  = 64
	DefaultMaxStringBytes = 4096
)

// WithDefaults returns l with every zero or negative field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxExtensions <= 0 {
		l.MaxExtensions = DefaultMaxExtensions
	}
	if l.MaxStringBytes <= 0 {
		l.MaxStringBytes = DefaultMaxStringBytes
	}
	return l
}
