package partitioning

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
)

// Header names of the record format (docs/record-format.md). A header is
// present only when the event carries the attribute.
const (
	HeaderDialect      = "aep-dialect"
	HeaderID           = "aep-id"
	HeaderType         = "aep-type"
	HeaderSource       = "aep-source"
	HeaderSession      = "aep-session"
	HeaderConversation = "aep-conversation"
	HeaderTask         = "aep-task"
	HeaderTarget       = "aep-target"
	HeaderTopic        = "aep-topic"
	HeaderAgent        = "aep-agent"
	HeaderSubject      = "aep-subject"
	HeaderRun          = "aep-run"
	HeaderStep         = "aep-step"
	HeaderCause        = "aep-cause"
	HeaderSeverity     = "aep-severity"
	HeaderCapture      = "aep-capture"
	HeaderEpoch        = "aep-epoch"
	HeaderSeq          = "aep-seq"
	// HeaderExtPrefix prefixes a dialect R extension attribute; its value is
	// the attribute's raw JSON.
	HeaderExtPrefix = "aep-x-"
)

// AppendHeaders appends the routing headers of a to dst and returns it.
func AppendHeaders(dst []kgo.RecordHeader, a *aep.Attrs) []kgo.RecordHeader {
	add := func(k, v string) {
		if v != "" {
			dst = append(dst, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	add(HeaderDialect, a.Dialect.String())
	add(HeaderID, a.ID)
	add(HeaderType, a.Type)
	add(HeaderSource, a.Source)
	add(HeaderSession, a.Session)
	add(HeaderConversation, a.Conversation)
	add(HeaderTask, a.Task)
	add(HeaderTarget, a.Target)
	add(HeaderTopic, a.Topic)
	add(HeaderAgent, a.Agent)
	add(HeaderSubject, a.Subject)
	add(HeaderRun, a.Run)
	add(HeaderStep, a.Step)
	add(HeaderCause, a.Cause)
	add(HeaderSeverity, a.Severity)
	add(HeaderCapture, a.Capture)
	if a.HasEpoch {
		add(HeaderEpoch, strconv.FormatInt(a.Epoch, 10))
	}
	if a.HasSeq {
		add(HeaderSeq, strconv.FormatInt(a.Seq, 10))
	}
	for _, e := range a.Ext {
		dst = append(dst, kgo.RecordHeader{Key: HeaderExtPrefix + e.Name, Value: e.Value})
	}
	return dst
}

// DecodeHeaders fills a from a record's headers, resetting it first. Unknown
// headers are ignored (records written by other producers may carry their
// own); a malformed epoch or seq is an error.
func DecodeHeaders(hs []kgo.RecordHeader, a *aep.Attrs) error {
	ext := a.Ext[:0]
	*a = aep.Attrs{}
	for _, h := range hs {
		v := string(h.Value)
		switch h.Key {
		case HeaderDialect:
			a.Dialect = aep.ParseDialect(v)
		case HeaderID:
			a.ID = v
		case HeaderType:
			a.Type = v
		case HeaderSource:
			a.Source = v
		case HeaderSession:
			a.Session = v
		case HeaderConversation:
			a.Conversation = v
		case HeaderTask:
			a.Task = v
		case HeaderTarget:
			a.Target = v
		case HeaderTopic:
			a.Topic = v
		case HeaderAgent:
			a.Agent = v
		case HeaderSubject:
			a.Subject = v
		case HeaderRun:
			a.Run = v
		case HeaderStep:
			a.Step = v
		case HeaderCause:
			a.Cause = v
		case HeaderSeverity:
			a.Severity = v
		case HeaderCapture:
			a.Capture = v
		case HeaderEpoch:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("header %s: %w", h.Key, err)
			}
			a.Epoch, a.HasEpoch = n, true
		case HeaderSeq:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("header %s: %w", h.Key, err)
			}
			a.Seq, a.HasSeq = n, true
		default:
			if name, ok := strings.CutPrefix(h.Key, HeaderExtPrefix); ok && name != "" {
				ext = append(ext, aep.Ext{Name: name, Value: h.Value})
			}
		}
	}
	a.Ext = ext
	return nil
}
