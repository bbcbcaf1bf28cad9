package cursor

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record headers this package reads (the layout is decided in partitioning/
// and documented in docs/; only these three matter here).
const (
	HeaderSession = "aep-session"
	HeaderEpoch   = "aep-epoch"
	HeaderSeq     = "aep-seq"
)

// sessionEvent extracts the session and position of a record. ok is false
// for records without a session or without a seq: they are not resumable
// positions (AEP-0003 §3.3: agent-scoped events carry no id). A missing
// epoch is 0, the AEP-0001 default; a malformed number makes the record
// unpositioned rather than failing the index.
func sessionEvent(r *kgo.Record, session string) (pos Position, match bool, ok bool) {
	// The header values stay bytes until the session matches: a resolve
	// scan passes thousands of other sessions' records through here, and
	// converting their headers to strings was about a tenth of its
	// allocations.
	var sess, ep, sq []byte
	var hasSess, hasSeq bool
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderSession:
			sess, hasSess = h.Value, true
		case HeaderEpoch:
			ep = h.Value
		case HeaderSeq:
			sq, hasSeq = h.Value, true
		}
	}
	if !hasSess || (session != "" && string(sess) != session) {
		return pos, false, false
	}
	pos.Session = string(sess)
	if !hasSeq {
		return pos, true, false
	}
	seq, err := strconv.ParseInt(string(sq), 10, 64)
	if err != nil || seq < 0 {
		return pos, true, false
	}
	var epoch int64
	if len(ep) > 0 {
		if epoch, err = strconv.ParseInt(string(ep), 10, 64); err != nil || epoch < 0 {
			return pos, true, false
		}
	}
	pos.Epoch, pos.Seq = epoch, seq
	return pos, true, true
}
