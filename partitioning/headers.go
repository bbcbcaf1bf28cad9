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
	// Dialect D transport-kafka.md's: correlation_id, causation_id and an
	// upstream hop's delivery.mode.
	HeaderCorrelation  = "aep-correlation"
	HeaderCausation    = "aep-causation"
	HeaderDeliveryMode = "aep-delivery-mode"
	HeaderEpoch        = "aep-epoch"
	HeaderSeq          = "aep-seq"
	// Who published the event (gateway.publisher): the principal the
	// credential names, how it authenticated (none, api_key, jwt) and the
	// binding it came over (http, ws). Not routing attributes: DecodeHeaders
	// skips them.
	HeaderPrincipal = "aep-principal"
	HeaderAuth      = "aep-auth"
	HeaderVia       = "aep-via"
	// HeaderEventPrincipal names the principal of an event's verified
	// event-level bearer authorization (dialect D), whose member the
	// gateway removed from the stored bytes.
	HeaderEventPrincipal = "aep-event-principal"
	// HeaderExtPrefix prefixes a dialect R extension attribute; its value is
	// the attribute's raw JSON.
	HeaderExtPrefix = "aep-x-"
)

// AppendHeaders appends the routing headers of a to dst and returns it. The
// header values share one allocation.
func AppendHeaders(dst []kgo.RecordHeader, a *aep.Attrs) []kgo.RecordHeader {
	dst, _ = AppendHeadersTo(dst, make([]byte, 0, HeaderValuesLen(a)), a)
	return dst
}

// HeaderValuesLen is the bytes AppendHeadersTo appends to buf for a: the
// string attributes plus room for the epoch and seq in decimal.
func HeaderValuesLen(a *aep.Attrs) int {
	n := len(a.ID) + len(a.Type) + len(a.Source) + len(a.Session) + len(a.Conversation) + len(a.Task) +
		len(a.Target) + len(a.Topic) + len(a.Agent) + len(a.Subject) + len(a.Run) + len(a.Step) +
		len(a.Cause) + len(a.Severity) + len(a.Capture) + len(a.Correlation) + len(a.Causation) + len(a.DeliveryMode) + 1 // the dialect
	if a.HasEpoch {
		n += 20
	}
	if a.HasSeq {
		n += 20
	}
	return n
}

// AppendHeadersTo is AppendHeaders with the header values appended to buf,
// which it returns: a caller building many records gives them one buffer
// (HeaderValuesLen sizes it) instead of an allocation per header. Each
// value is capped at its length, so appending to one never overwrites the
// next; when buf grows, values already appended keep the old array.
func AppendHeadersTo(dst []kgo.RecordHeader, buf []byte, a *aep.Attrs) ([]kgo.RecordHeader, []byte) {
	add := func(k string, v []byte) {
		dst = append(dst, kgo.RecordHeader{Key: k, Value: v[:len(v):len(v)]})
	}
	str := func(k, v string) {
		if v != "" {
			s := len(buf)
			buf = append(buf, v...)
			add(k, buf[s:])
		}
	}
	str(HeaderDialect, a.Dialect.String())
	str(HeaderID, a.ID)
	str(HeaderType, a.Type)
	str(HeaderSource, a.Source)
	str(HeaderSession, a.Session)
	str(HeaderConversation, a.Conversation)
	str(HeaderTask, a.Task)
	str(HeaderTarget, a.Target)
	str(HeaderTopic, a.Topic)
	str(HeaderAgent, a.Agent)
	str(HeaderSubject, a.Subject)
	str(HeaderRun, a.Run)
	str(HeaderStep, a.Step)
	str(HeaderCause, a.Cause)
	str(HeaderSeverity, a.Severity)
	str(HeaderCapture, a.Capture)
	str(HeaderCorrelation, a.Correlation)
	str(HeaderCausation, a.Causation)
	str(HeaderDeliveryMode, a.DeliveryMode)
	if a.HasEpoch {
		s := len(buf)
		buf = strconv.AppendInt(buf, a.Epoch, 10)
		add(HeaderEpoch, buf[s:])
	}
	if a.HasSeq {
		s := len(buf)
		buf = strconv.AppendInt(buf, a.Seq, 10)
		add(HeaderSeq, buf[s:])
	}
	for _, e := range a.Ext {
		dst = append(dst, kgo.RecordHeader{Key: HeaderExtPrefix + e.Name, Value: e.Value})
	}
	return dst, buf
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
		case HeaderCorrelation:
			a.Correlation = v
		case HeaderCausation:
			a.Causation = v
		case HeaderDeliveryMode:
			a.DeliveryMode = v
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
