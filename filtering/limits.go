package filtering

// Limits bound what a client may put in one filter, so that a filter's
// compile cost, memory and match cost stay small and predictable. The zero
// value of a field means "use the DefaultLimits value". A filter over a limit
// is refused: dialect D with subscription_rejected, dialect R with
// limit-exceeded, and the message names the limit.
type Limits struct {
	// MaxBytes bounds the JSON text of a filter (default 64 KiB).
	MaxBytes int
	// MaxValues bounds the values (or type patterns) of one member
	// (default 256).
	MaxValues int
	// MaxTotalValues bounds the values over all members (default 1024).
	MaxTotalValues int
	// MaxValueLen bounds one value or pattern in bytes (default 1024).
	MaxValueLen int
	// MaxSegments bounds the dot-separated segments of a type pattern
	// (default 32).
	MaxSegments int
	// MaxMembers bounds the members of a dialect R filter (default 64).
	MaxMembers int
}

// DefaultLimits are the limits ParseD, ParseDQuery and ParseR apply.
var DefaultLimits = Limits{
	MaxBytes:       64 << 10,
	MaxValues:      256,
	MaxTotalValues: 1024,
	MaxValueLen:    1024,
	MaxSegments:    32,
	MaxMembers:     64,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxBytes > 0 {
		d.MaxBytes = l.MaxBytes
	}
	if l.MaxValues > 0 {
		d.MaxValues = l.MaxValues
	}
	if l.MaxTotalValues > 0 {
		d.MaxTotalValues = l.MaxTotalValues
	}
	if l.MaxValueLen > 0 {
		d.MaxValueLen = l.MaxValueLen
	}
	if l.MaxSegments > 0 {
		d.MaxSegments = l.MaxSegments
	}
	if l.MaxMembers > 0 {
		d.MaxMembers = l.MaxMembers
	}
	return d
}
