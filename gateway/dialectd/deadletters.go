package dialectd

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// DefaultDeadLetters is the limit of GET /aep/dead-letters without one.
const DefaultDeadLetters = 20

// DeadLettersHandler serves GET /aep/dead-letters?limit=N: the newest N
// (default 20, at most durable.MaxRecentDeadLetters) records of the
// request tenant's dead-letter topic, newest first, each the
// event.dead_lettered envelope the durable stream wrote. Mount it behind
// the gateway's authentication: the tenant comes from the request.
type DeadLettersHandler struct{ topicReader }

// NewDeadLettersHandler returns the handler; timeout bounds the Kafka
// work of one request (zero means 10 s).
func NewDeadLettersHandler(e *durable.Cluster, timeout time.Duration, log zerolog.Logger) *DeadLettersHandler {
	return &DeadLettersHandler{newTopicReader(e, timeout, 10*time.Second, log)}
}

// topicReader is what a handler reading a tenant's topics holds: the
// cluster, the bound of one request's Kafka work, the log.
type topicReader struct {
	e       *durable.Cluster
	timeout time.Duration
	log     zerolog.Logger
}

func newTopicReader(e *durable.Cluster, timeout, def time.Duration, log zerolog.Logger) topicReader {
	if timeout <= 0 {
		timeout = def
	}
	return topicReader{e: e, timeout: timeout, log: log}
}

// deadLetterView is one entry of the answer.
type deadLetterView struct {
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Time      time.Time       `json:"time"`
	Event     json.RawMessage `json:"event"` // the event.dead_lettered envelope; null when the record is not JSON
}

func (h *DeadLettersHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeErr(w, http.StatusMethodNotAllowed, aep.CodeDProtocolError, "method not allowed", false, nil)
		return
	}
	limit := DefaultDeadLetters
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > durable.MaxRecentDeadLetters {
			writeErr(w, http.StatusBadRequest, aep.CodeDProtocolError, "limit must be an integer from 1 to "+strconv.Itoa(durable.MaxRecentDeadLetters), false, map[string]string{"field": "limit"})
			return
		}
		limit = n
	}
	tn := requestTenant(r)
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	recs, truncated, err := h.e.RecentDeadLetters(ctx, tn, limit)
	if err != nil {
		h.log.Warn().Err(err).Stringer("tenant", tn).Msg("dialectd: dead letters")
		writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the dead-letter topic cannot be read", true, nil)
		return
	}
	out := struct {
		DeadLetters []deadLetterView `json:"dead_letters"`
		Limit       int              `json:"limit"`
		Truncated   bool             `json:"truncated,omitempty"`
	}{DeadLetters: make([]deadLetterView, 0, len(recs)), Limit: limit, Truncated: truncated}
	for _, rec := range recs {
		v := deadLetterView{Partition: rec.Partition, Offset: rec.Offset, Time: rec.Time.UTC(), Event: json.RawMessage("null")}
		if json.Valid(rec.Value) {
			v.Event = rec.Value
		}
		out.DeadLetters = append(out.DeadLetters, v)
	}
	transport.WriteJSON(w, http.StatusOK, out)
}
