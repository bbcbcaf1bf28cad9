package cursor

import (
	"strconv"
	"strings"
)

// Position is a dialect R resume token: a place in one session's
// emitter-owned order (AEP-0001 §7.6). Positions of a session are ordered
// lexicographically by (Epoch, Seq); gaps are legal and a new epoch starts a
// new counter, so (2, 0) comes after (1, 900).
type Position struct {
	Session string
	Epoch   int64
	Seq     int64
}

// Compare orders two positions of the same session: -1, 0 or +1 as p is
// before, at or after q. Session is not compared.
func (p Position) Compare(q Position) int {
	switch {
	case p.Epoch < q.Epoch:
		return -1
	case p.Epoch > q.Epoch:
		return 1
	case p.Seq < q.Seq:
		return -1
	case p.Seq > q.Seq:
		return 1
	}
	return 0
}

// After reports whether (epoch, seq) comes strictly after p in p's session.
func (p Position) After(epoch, seq int64) bool {
	return Position{Epoch: epoch, Seq: seq}.Compare(p) > 0
}

// String is the SSE id: form of AEP-0003 §3.3: {session}:{epoch}:{seq}.
func (p Position) String() string {
	return p.Session + ":" + strconv.FormatInt(p.Epoch, 10) + ":" + strconv.FormatInt(p.Seq, 10)
}

// MaxSessionLen bounds the session of a parsed position.
const MaxSessionLen = 1024

// ParsePosition parses the {session}:{epoch}:{seq} form that R clients send
// back in Last-Event-ID. The session may itself contain colons: epoch and
// seq are the last two fields. Epoch and seq are non-negative decimal
// integers without sign or leading zeros beyond "0". Errors wrap ErrMalformed.
func ParsePosition(s string) (Position, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Position{}, errf(ErrMalformed, "position needs session:epoch:seq")
	}
	j := strings.LastIndexByte(s[:i], ':')
	if j < 0 {
		return Position{}, errf(ErrMalformed, "position needs session:epoch:seq")
	}
	sess, es, ss := s[:j], s[j+1:i], s[i+1:]
	if sess == "" || len(sess) > MaxSessionLen {
		return Position{}, errf(ErrMalformed, "session empty or longer than %d bytes", MaxSessionLen)
	}
	e, ok1 := parseNonNeg(es)
	q, ok2 := parseNonNeg(ss)
	if !ok1 || !ok2 {
		return Position{}, errf(ErrMalformed, "epoch and seq must be non-negative integers")
	}
	return Position{Session: sess, Epoch: e, Seq: q}, nil
}

func parseNonNeg(s string) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}
