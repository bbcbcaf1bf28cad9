package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// eventView is what the pretty printer and the resume tracker read of an
// event of either dialect.
type eventView struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Time      string          `json:"time"`       // R
	CreatedAt string          `json:"created_at"` // D
	Source    string          `json:"source"`
	Session   string          `json:"session"`    // R
	SessionID string          `json:"session_id"` // D
	Epoch     *int64          `json:"epoch"`
	Seq       *int64          `json:"seq"`
	Data      json.RawMessage `json:"data"`    // R
	Payload   json.RawMessage `json:"payload"` // D
	Delivery  struct {
		Cursor string `json:"cursor"`
	} `json:"delivery"`
}

// printer writes stream items in one of the tail output formats.
type printer struct {
	w      io.Writer
	format string // pretty, ndjson or json
	width  int    // most runes of payload in pretty lines
}

// print writes one event.
func (p *printer) print(it aepclient.Item, v *eventView) {
	switch p.format {
	case "ndjson":
		_, _ = p.w.Write(append(bytes.TrimSpace(it.Data), '\n')) // stdout: a failed write shows as the reader's error
	case "json":
		b, _ := json.Marshal(struct {
			Event string          `json:"event"`
			ID    string          `json:"id,omitempty"`
			Data  json.RawMessage `json:"data"`
		}{it.Type, it.ID, json.RawMessage(bytes.TrimSpace(it.Data))})
		_, _ = p.w.Write(append(b, '\n'))
	default:
		fmt.Fprintln(p.w, prettyLine(it, v, p.width))
	}
}

// prettyLine is "time  type  source  session  payload", the payload cut to
// width runes.
func prettyLine(it aepclient.Item, v *eventView, width int) string {
	ts := v.Time
	if ts == "" {
		ts = v.CreatedAt
	}
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		ts = t.UTC().Format("15:04:05.000")
	}
	typ := v.Type
	if typ == "" {
		typ = it.Type
	}
	session := v.Session
	if session == "" {
		session = v.SessionID
	}
	if v.Seq != nil {
		epoch := int64(0)
		if v.Epoch != nil {
			epoch = *v.Epoch
		}
		session += ":" + strconv.FormatInt(epoch, 10) + ":" + strconv.FormatInt(*v.Seq, 10)
	}
	if session == "" {
		session = "-"
	}
	body := v.Data
	if body == nil {
		body = v.Payload
	}
	return fmt.Sprintf("%-12s  %-24s  %-28s  %-20s  %s", orDash(ts), typ, orDash(v.Source), session, shorten(body, width))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shorten compacts JSON onto one line and cuts it to width runes.
func shorten(raw json.RawMessage, width int) string {
	if len(raw) == 0 {
		return "-"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	s := strings.ReplaceAll(b.String(), "\n", " ")
	if width > 0 && utf8.RuneCountInString(s) > width {
		r := []rune(s)
		s = string(r[:width]) + "…"
	}
	return s
}

// maxResumeSessions bounds the R positions kept for the resume hint (the
// gateway's default limit of positions in one "from").
const maxResumeSessions = 64

// resumeTracker remembers where a stream can be resumed: D's last cursor,
// R's last position per session.
type resumeTracker struct {
	dialect aep.Dialect
	cursor  string
	pos     map[string]rPosition
	order   []string // sessions, least recently updated first
}

type rPosition struct {
	Session string `json:"session"`
	Epoch   int64  `json:"epoch"`
	Seq     int64  `json:"seq"`
}

func newResumeTracker(d aep.Dialect) *resumeTracker {
	return &resumeTracker{dialect: d, pos: map[string]rPosition{}}
}

// observe records an event (or a D stream message carrying a cursor).
func (r *resumeTracker) observe(it aepclient.Item, v *eventView) {
	if r.dialect == aep.DialectD {
		switch {
		case v.Delivery.Cursor != "":
			r.cursor = v.Delivery.Cursor
		case it.ID != "":
			r.cursor = it.ID
		case v.Type == "event.replayed":
			var p struct {
				To string `json:"to_cursor"`
			}
			if json.Unmarshal(v.Payload, &p) == nil && p.To != "" {
				r.cursor = p.To
			}
		}
		return
	}
	if v.Session == "" || v.Seq == nil {
		return
	}
	epoch := int64(0)
	if v.Epoch != nil {
		epoch = *v.Epoch
	}
	if _, ok := r.pos[v.Session]; ok {
		for i, s := range r.order {
			if s == v.Session {
				r.order = append(r.order[:i], r.order[i+1:]...)
				break
			}
		}
	} else if len(r.order) >= maxResumeSessions {
		delete(r.pos, r.order[0])
		r.order = r.order[1:]
	}
	r.order = append(r.order, v.Session)
	r.pos[v.Session] = rPosition{Session: v.Session, Epoch: epoch, Seq: *v.Seq}
}

// flag returns the flag and value that resume after what was observed, or
// "" when nothing was.
func (r *resumeTracker) flag() (name, value string) {
	if r.dialect == aep.DialectD {
		if r.cursor == "" {
			return "", ""
		}
		return "--from-cursor", r.cursor
	}
	if len(r.order) == 0 {
		return "", ""
	}
	ps := make([]rPosition, 0, len(r.order))
	for _, s := range r.order {
		ps = append(ps, r.pos[s])
	}
	b, _ := json.Marshal(ps)
	return "--from", string(b)
}

// resumeSpec is spec continued after what was observed: D from the last
// cursor (replayable: best_effort has no replay), R from the last positions.
// Before any event it is spec itself.
func (r *resumeTracker) resumeSpec(spec aepclient.StreamSpec) aepclient.StreamSpec {
	name, value := r.flag()
	switch name {
	case "--from-cursor":
		spec.Cursor, spec.Mode = value, "replayable"
	case "--from":
		spec.From = json.RawMessage(value)
	}
	return spec
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
