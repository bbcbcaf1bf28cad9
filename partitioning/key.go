package partitioning

import (
	"fmt"

	"github.com/aep-gateway/aep-gateway/aep"
)

// KeyStrategy chooses the Kafka record key, and so the partition, of an event.
type KeyStrategy uint8

const (
	// KeySession keys by the session (R session, D session_id), falling back
	// to source. The default: a session stays ordered.
	KeySession KeyStrategy = iota
	// KeyBinding is dialect D's Kafka binding order (transport-kafka.md):
	// task_id > conversation_id > session_id > source. Dialect R events,
	// which carry none of task/conversation, key by session then source.
	KeyBinding
)

// ParseKeyStrategy reads a strategy from configuration: "session" or "binding".
func ParseKeyStrategy(s string) (KeyStrategy, error) {
	switch s {
	case "", "session":
		return KeySession, nil
	case "binding":
		return KeyBinding, nil
	}
	return 0, fmt.Errorf("unknown key strategy %q (want session or binding)", s)
}

func (k KeyStrategy) String() string {
	if k == KeyBinding {
		return "binding"
	}
	return "session"
}

// Key returns the record key of an event. Validation guarantees source is
// present in both dialects, so the key is never empty for a valid event.
func (k KeyStrategy) Key(a *aep.Attrs) string {
	if k == KeyBinding {
		if a.Task != "" {
			return a.Task
		}
		if a.Conversation != "" {
			return a.Conversation
		}
	}
	if a.Session != "" {
		return a.Session
	}
	return a.Source
}
