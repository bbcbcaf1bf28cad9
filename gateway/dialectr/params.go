package dialectr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/filtering"
)

// reqError is a refused subscription: a code of AEP-0003 §6.5's closed set
// and a sentence for the client.
type reqError struct {
	Code   string
	Detail string
}

func (e *reqError) Error() string { return e.Code + ": " + e.Detail }

func invalid(format string, args ...any) *reqError {
	return &reqError{Code: aep.CodeRInvalidFilter, Detail: fmt.Sprintf(format, args...)}
}

// subParams is a validated subscription request, the same for SSE query
// parameters and WebSocket subscribe frames.
type subParams struct {
	filter *filtering.Filter
	// ceiling is the capture ceiling; 0 means none asked ("as stored").
	ceiling aep.Capture
	// from are the resume positions; nil means live.
	from []cursor.Position
	// all is from "all": replay every session the log holds (AEP-0003 §5).
	all bool
	// noLive is live=0 (SSE): end the stream after the replay (§5).
	noLive bool
	// since (SSE, not in AEP-0003) replays every session-scoped event the
	// log got in that last stretch of time, like all from a later start.
	since time.Duration
}

// parseFilter parses an attr-match filter; empty input means {} (match all).
func (rl *Relay) parseFilter(raw []byte) (*filtering.Filter, *reqError) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	f, err := rl.cfg.FilterLimits.ParseR(raw)
	if err != nil {
		var fe *filtering.Error
		if errors.As(err, &fe) {
			code := fe.Code
			if code != aep.CodeRLimitExceeded {
				code = aep.CodeRInvalidFilter
			}
			return nil, &reqError{Code: code, Detail: fe.Message}
		}
		return nil, invalid("filter: %v", err)
	}
	return f, nil
}

// parseCapture parses a capture ceiling; "" means none asked.
func parseCapture(s string) (aep.Capture, *reqError) {
	if s == "" {
		return 0, nil
	}
	c, ok := aep.ParseCapture(s)
	if !ok {
		return 0, invalid("capture must be one of none, metadata, redacted, full; got %q", trunc(s))
	}
	return c, nil
}

// wirePosition is one member of a from array (AEP-0003 §3.3 rule 1, §6.5).
type wirePosition struct {
	Session *string      `json:"session"`
	Epoch   *json.Number `json:"epoch"`
	Seq     *json.Number `json:"seq"`
}

// parseFrom parses a from value: a JSON array of {session, epoch, seq}, or
// the literal all (replay-all, AEP-0003 §5; bare in an SSE query, a JSON
// string in a WebSocket frame), reported as all. Several positions of one
// session keep the earliest. More than max positions is limit-exceeded.
func parseFrom(raw []byte, max int) ([]cursor.Position, bool, *reqError) {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "all" || string(raw) == `"all"` {
		return nil, true, nil
	}
	ps, err := parsePositions(raw, max)
	return ps, false, err
}

func parsePositions(raw []byte, max int) ([]cursor.Position, *reqError) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || list == nil {
		return nil, invalid("from must be a JSON array of {session, epoch, seq} or \"all\"")
	}
	if len(list) > max {
		return nil, &reqError{Code: aep.CodeRLimitExceeded, Detail: fmt.Sprintf("from names %d positions; this relay replays at most %d per subscription", len(list), max)}
	}
	out := make([]cursor.Position, 0, len(list))
	index := make(map[string]int, len(list))
	for i, m := range list {
		var wp wirePosition
		d := json.NewDecoder(bytes.NewReader(m))
		d.UseNumber()
		if err := d.Decode(&wp); err != nil {
			return nil, invalid("from[%d] must be an object {session, epoch, seq}", i)
		}
		if wp.Session == nil || *wp.Session == "" || len(*wp.Session) > cursor.MaxSessionLen {
			return nil, invalid("from[%d].session must be a non-empty string of at most %d bytes", i, cursor.MaxSessionLen)
		}
		p := cursor.Position{Session: *wp.Session}
		var err error
		if p.Seq, err = nonNegative(wp.Seq, true); err != nil {
			return nil, invalid("from[%d].seq %v", i, err)
		}
		if p.Epoch, err = nonNegative(wp.Epoch, false); err != nil {
			return nil, invalid("from[%d].epoch %v", i, err)
		}
		if j, ok := index[p.Session]; ok {
			if p.Compare(out[j]) < 0 {
				out[j] = p
			}
			continue
		}
		index[p.Session] = len(out)
		out = append(out, p)
	}
	return out, nil
}

func nonNegative(n *json.Number, required bool) (int64, error) {
	if n == nil {
		if required {
			return 0, errors.New("is required")
		}
		return 0, nil // an absent epoch is epoch 0 (AEP-0001 §7.2)
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil || v < 0 {
		return 0, errors.New("must be a non-negative integer")
	}
	return v, nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
