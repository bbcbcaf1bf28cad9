package dialectd

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/gateway/transport"
	"github.com/aep-gateway/aep-gateway/internal/auditlog"
	"github.com/aep-gateway/aep-gateway/internal/auditread"
)

// proof answers GET /aep/audit/events/{id}/proof: the inclusion proof of
// rec (docs/audit.md, "Proofs") built from its audit partition, read twice
// (the heads, then the leaves of the chosen one) in O(log n) memory and
// at most maxRecords checkpoint records a pass. The proof is not checked
// here: whoever asks checks it with the public key
// (`aepctl audit check-proof`).
func (h *AuditHandler) proof(ctx context.Context, w http.ResponseWriter, tn tenant.Tenant, rec *kgo.Record, maxRecords int) {
	topic := h.e.AuditTopic(tn)
	ps := auditlog.NewProofScan(rec.Offset)
	pass := func(each func(*auditlog.Checkpoint)) bool {
		scan, err := h.e.FindRecords(ctx, topic, rec.Partition, maxRecords, 1, func(r *kgo.Record) bool {
			if c, err := auditlog.ParseCheckpoint(r.Value); err == nil {
				each(c)
			}
			return false
		})
		if err != nil {
			h.log.Warn().Err(err).Stringer("tenant", tn).Msg("dialectd: audit proof")
			writeErr(w, http.StatusServiceUnavailable, aep.CodeDInternalError, "the audit topic could not be read: "+err.Error(), true, nil)
			return false
		}
		if !scan.Complete {
			writeErr(w, http.StatusUnprocessableEntity, aep.CodeDProtocolError, "the audit partition holds more than "+strconv.Itoa(maxRecords)+" checkpoints (max_records); prove it offline: aepctl audit prove", false, nil)
			return false
		}
		return true
	}
	if !pass(ps.Head) {
		return
	}
	if err := ps.Choose(); err != nil {
		msg := "the event is not sealed yet: the sealer checkpoints every few seconds (is one running? docs/audit.md)"
		if !errors.Is(err, auditlog.ErrNotSealed) {
			msg = err.Error()
		}
		writeErr(w, http.StatusNotFound, aep.CodeDProtocolError, msg, true, map[string]string{"partition": strconv.Itoa(int(rec.Partition)), "offset": strconv.FormatInt(rec.Offset, 10)})
		return
	}
	if !pass(ps.Leaves) {
		return
	}
	p, err := ps.Proof(auditread.RecordOf(rec))
	if err != nil {
		writeErr(w, http.StatusConflict, aep.CodeDInternalError, err.Error(), true, nil)
		return
	}
	transport.WriteJSON(w, http.StatusOK, p)
}
