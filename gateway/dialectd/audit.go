package dialectd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/durable"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// DefaultAuditScan is how many records GET /aep/audit/events/{id} reads
// without max_records, in the events topic and in the dead-letter topic.
const DefaultAuditScan = 1_000_000

// AuditHandler serves GET /aep/audit/events/{id}[?partition=P][&max_records=N]
// and, with /proof after the id, the event's inclusion proof (proof.go):
// security.md's minimum audit record of one event of the request's tenant
// (id, type, source, target, created_at; the transport and auth identity
// its record's headers name; its delivery status in every durable
// subscription whose filter matches it). The log has no index by event id:
// the events topic is read from the start (of partition P when given: the
// ingest answer's position names it) until the event is found or N records
// were read, and the dead-letter topic likewise. Only a tenant-wide
// credential may ask (a principal with scopes gets 403): the record names
// other principals and subscriptions.
type AuditHandler struct{ topicReader }

// NewAuditHandler returns the handler; timeout bounds one request's Kafka
// work (zero means 30 s).
func NewAuditHandler(e *durable.Cluster, timeout time.Duration, log zerolog.Logger) *AuditHandler {
	return &AuditHandler{newTopicReader(e, timeout, 30*time.Second, log)}
}

// auditRecord is the answer.
type auditRecord struct {
	Event struct {
		ID        string    `json:"id"`
		Type      string    `json:"type"`
		Source    string    `json:"source"`
		Target    string    `json:"target,omitempty"`
		CreatedAt string    `json:"created_at,omitempty"`
		Partition int32     `json:"partition"`
		Offset    int64     `json:"offset"`
		Appended  time.Time `json:"appended_at"`
	} `json:"event"`
	Published struct {
		Principal      string `json:"principal,omitempty"`
		Auth           string `json:"auth,omitempty"`
		Via            string `json:"via,omitempty"`
		EventPrincipal string `json:"event_principal,omitempty"`
	} `json:"published"`
	Deliveries []auditDelivery `json:"deliveries"`
	Scanned    int             `json:"scanned"`
	// DeadLettersComplete is false when the dead-letter topic was not read
	// to its end (max_records): a dead letter may be missing.
	DeadLettersComplete bool `json:"dead_letters_complete"`
}

// auditDelivery is the event's status in one durable subscription:
// acknowledged (its committed offset is past the event), dead_lettered (a
// dead letter names the event and the subscription), or pending (not
// delivered yet, delivered and unacknowledged, or acknowledged while an
// earlier event is not: the committed offset moves over contiguous acks).
type auditDelivery struct {
	SubscriptionID string `json:"subscription_id"`
	Status         string `json:"status"`
	Committed      int64  `json:"committed"` // of the event's partition; -1: none yet
	Attempts       int    `json:"attempts,omitempty"`
	LastError      string `json:"last_error,omitempty"`
}

func (h *AuditHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeErr(w, http.StatusMethodNotAllowed, aep.CodeDProtocolError, "method not allowed", false, nil)
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, "/aep/audit/events/")
	id, proof := strings.CutSuffix(id, "/proof")
	if !ok || id == "" || strings.Contains(id, "/") || len(id) > 256 {
		writeErr(w, http.StatusNotFound, aep.CodeDProtocolError, "GET /aep/audit/events/{id}", false, nil)
		return
	}
	tn := requestTenant(r)
	if p := tn.Principal(); p.Restricted() {
		writeErr(w, http.StatusForbidden, aep.CodeDUnauthorized, "audit records are for tenant-wide credentials: principal "+aep.QuoteTrunc(p.ID)+" has scopes", false, nil)
		return
	}
	q := r.URL.Query()
	partition := int32(-1)
	if s := q.Get("partition"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			writeErr(w, http.StatusBadRequest, aep.CodeDProtocolError, "partition must be an integer >= 0", false, map[string]string{"field": "partition"})
			return
		}
		partition = int32(n)
	}
	maxRecords := DefaultAuditScan
	if s := q.Get("max_records"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > durable.MaxScanRecords {
			writeErr(w, http.StatusBadRequest, aep.CodeDProtocolError, "max_records must be from 1 to "+strconv.Itoa(durable.MaxScanRecords), false, map[string]string{"field": "max_records"})
			return
		}
		maxRecords = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	idb := []byte(id)
	scan, err := h.e.FindRecords(ctx, h.e.EventsTopic(tn), partition, maxRecords, 1, func(rec *kgo.Record) bool {
		for _, hd := range rec.Headers {
			if hd.Key == partitioning.HeaderID {
				return bytes.Equal(hd.Value, idb)
			}
		}
		return false
	})
	if err != nil {
		h.log.Warn().Err(err).Stringer("tenant", tn).Msg("dialectd: audit scan")
		writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the events topic could not be read: "+err.Error(), true, nil)
		return
	}
	if len(scan.Found) == 0 {
		msg := "no event " + aep.QuoteTrunc(id) + " in the tenant's log"
		if !scan.Complete {
			msg += " within the first " + strconv.Itoa(scan.Scanned) + " records read (max_records; give partition to narrow the search)"
		}
		writeErr(w, http.StatusNotFound, aep.CodeDProtocolError, msg, false, map[string]string{"scanned": strconv.Itoa(scan.Scanned)})
		return
	}
	if proof {
		h.proof(ctx, w, tn, scan.Found[0], maxRecords)
		return
	}
	out, ok := h.record(ctx, w, r, scan.Found[0], maxRecords)
	if !ok {
		return
	}
	out.Scanned = scan.Scanned
	transport.WriteJSON(w, http.StatusOK, out)
}

// record assembles the audit record of rec (answering 503 itself when the
// subscriptions cannot be read).
func (h *AuditHandler) record(ctx context.Context, w http.ResponseWriter, r *http.Request, rec *kgo.Record, maxRecords int) (*auditRecord, bool) {
	tn := requestTenant(r)
	out := &auditRecord{Deliveries: []auditDelivery{}}
	var attrs aep.Attrs
	_ = partitioning.DecodeHeaders(rec.Headers, &attrs)
	e := &out.Event
	e.ID, e.Type, e.Source, e.Target = attrs.ID, attrs.Type, attrs.Source, attrs.Target
	e.Partition, e.Offset, e.Appended = rec.Partition, rec.Offset, rec.Timestamp.UTC()
	var body struct {
		CreatedAt string `json:"created_at"`
		Time      string `json:"time"` // dialect R
	}
	_ = json.Unmarshal(rec.Value, &body)
	e.CreatedAt = body.CreatedAt
	if e.CreatedAt == "" {
		e.CreatedAt = body.Time
	}
	for _, hd := range rec.Headers {
		switch hd.Key {
		case partitioning.HeaderPrincipal:
			out.Published.Principal = string(hd.Value)
		case partitioning.HeaderAuth:
			out.Published.Auth = string(hd.Value)
		case partitioning.HeaderVia:
			out.Published.Via = string(hd.Value)
		case partitioning.HeaderEventPrincipal:
			out.Published.EventPrincipal = string(hd.Value)
		}
	}
	if attrs.Dialect != aep.DialectD {
		out.DeadLettersComplete = true
		return out, true // durable subscriptions are dialect D's
	}
	defs, err := h.e.Subscriptions(ctx, tn)
	if err != nil {
		h.log.Warn().Err(err).Stringer("tenant", tn).Msg("dialectd: audit subscriptions")
		writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the subscriptions cannot be read", true, nil)
		return nil, false
	}
	// The subscriptions whose filter matches the event: only they can hold
	// a delivery of it, and without any there is nothing to read further.
	var matching []string
	for id, def := range defs {
		if f, err := filtering.ParseD(def.Filter); err == nil && f.Match(&attrs) {
			matching = append(matching, id)
		}
	}
	if len(matching) == 0 {
		out.DeadLettersComplete = true
		return out, true
	}
	dead := h.deadLetters(ctx, tn, out, attrs.ID, maxRecords)
	for _, id := range matching {
		d := auditDelivery{SubscriptionID: id, Status: "pending", Committed: -1}
		committed, err := h.e.Committed(ctx, tn, durable.SubscriptionGroup(tn, id))
		if err != nil {
			h.log.Warn().Err(err).Stringer("tenant", tn).Str("subscription", id).Msg("dialectd: audit committed offsets")
			writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "committed offsets cannot be read", true, nil)
			return nil, false
		}
		if c, ok := committed[rec.Partition]; ok {
			d.Committed = c
			if c > rec.Offset {
				d.Status = "acknowledged"
			}
		}
		if dl, ok := dead[id]; ok {
			d.Status, d.Attempts, d.LastError = "dead_lettered", dl.Attempts, dl.LastError.Code+": "+dl.LastError.Message
		}
		out.Deliveries = append(out.Deliveries, d)
	}
	slices.SortFunc(out.Deliveries, func(a, b auditDelivery) int { return strings.Compare(a.SubscriptionID, b.SubscriptionID) })
	return out, true
}

// deadLetters reads the tenant's dead letters of event id, by
// subscription, and records in out whether the read was complete (an
// unreadable topic is logged and leaves it incomplete).
func (h *AuditHandler) deadLetters(ctx context.Context, tn tenant.Tenant, out *auditRecord, id string, maxRecords int) map[string]aep.DDeadLettered {
	needle := []byte(`"original_event_id":` + strconv.Quote(id))
	dls, err := h.e.FindRecords(ctx, h.e.DeadLetterTopic(tn), -1, maxRecords, 1000, func(rec *kgo.Record) bool {
		return bytes.Contains(rec.Value, needle)
	})
	if err != nil {
		h.log.Warn().Err(err).Stringer("tenant", tn).Msg("dialectd: audit dead letters")
	}
	out.DeadLettersComplete = err == nil && dls.Complete
	dead := map[string]aep.DDeadLettered{}
	for _, rec := range dls.Found {
		var env struct {
			Payload aep.DDeadLettered `json:"payload"`
		}
		if json.Unmarshal(rec.Value, &env) == nil && env.Payload.OriginalEventID == id {
			dead[env.Payload.SubscriptionID] = env.Payload
		}
	}
	return dead
}
