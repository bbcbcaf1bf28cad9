package aep

import (
	"strconv"
)

// Dialect D envelope rules: schemas/aep-envelope.schema.json at rev 08ad33e,
// docs/protocol/versioning.md, error-model.md.

var (
	beliefStatusD = [...]string{"asserted", "retracted", "revised", "contradicted", "unknown"}
	beliefScopeD  = [...]string{"fact", "inference", "observation", "preference", "hypothesis"}
	interruptionD = [...]string{"save_and_stop", "drain_then_stop", "force_stop"}
	sourceTrustD  = [...]string{"verified", "attested", "unverified", "signed"}
)

func (p *parser) validateD(a *Attrs) *failure {
	v := p.get(aAepVersion)
	if v.kind != vString || v.end-v.start == 2 {
		return fail(KindInvalid, "aep_version", "aep_version must be a non-empty string such as \"0.1\"")
	}
	if s := p.str(v); !VersionSupported(DialectD, string(s)) {
		return fail(KindVersion, "aep_version", "unsupported aep_version "+quoteTrunc(s)+"; supported: "+listOf(versionsD[:]))
	}
	unknown := 0
	for i := 0; i < p.n; i++ {
		m := p.mem(i)
		if !m.attr.isD() {
			unknown++               // versioning.md: ignore unknown fields
			switch string(m.name) { // (decoded: an escaped name is seen too)
			case "tenant_id":
				a.Claims |= ClaimTenantID
			case "authorization":
				a.Claims |= ClaimAuthorization
			}
			continue
		}
		var f *failure
		switch m.attr {
		case aID:
			f = p.stringD(m, true, oID)
		case aSource:
			f = p.stringD(m, true, oSource)
		case aStaleAfter:
			f = p.stringD(m, true, oNone)
		case aType:
			if f = wantKindD(m, vString, "a string"); f == nil {
				t := p.str(m)
				if !validTypeD(t) {
					f = fail(KindInvalid, "type", "invalid event type: "+quoteTrunc(t)+" (want ^[a-z][a-z0-9]*(\\.[a-z][a-z0-9_]*)+$)")
				} else {
					p.emit(oType, t)
				}
			}
		case aTarget:
			f = p.stringD(m, false, oTarget)
		case aTopic:
			f = p.stringD(m, false, oTopic)
		case aSessionID:
			f = p.stringD(m, false, oSession)
		case aConversationID:
			f = p.stringD(m, false, oConversation)
		case aTaskID:
			f = p.stringD(m, false, oTask)
		case aCorrelationID:
			f = p.stringD(m, false, oCorrelation)
		case aCausationID:
			f = p.stringD(m, false, oCausation)
		case aDelegatedBy, aDelegatedTo, aParentTaskID,
			aHandoffToken, aCheckpointID, aCompensationID:
			f = p.stringD(m, false, oNone)
		case aCreatedAt, aValidFrom, aValidUntil, aCheckpointAt:
			f = p.dateTimeD(m)
		case aExpiresAt:
			if m.kind != vNull {
				f = p.dateTimeD(m)
			}
		case aPayloadSchema, aRefreshHint, aDataProvenance:
			if f = wantKindD(m, vString, "a URI string"); f == nil && !validURI(p.str(m)) {
				f = fail(KindInvalid, string(m.name), string(m.name)+" must be an absolute URI; got "+quoteTrunc(p.str(m)))
			}
		case aBeliefStatus:
			f = p.enumD(m, beliefStatusD[:])
		case aBeliefScope:
			f = p.enumD(m, beliefScopeD[:])
		case aInterruptionPolicy:
			f = p.enumD(m, interruptionD[:])
		case aSourceTrust:
			f = p.enumD(m, sourceTrustD[:])
		case aConfidence:
			f = p.numberD(m, 1)
		case aAttestationCount:
			f = p.numberD(m, -1)
		case aEvidenceChain:
			f = p.evidenceChainD(m)
		case aDelivery:
			f = p.deliveryD(m)
		}
		if f != nil {
			return f
		}
	}
	for _, r := range [...]attr{aID, aType, aSource, aCreatedAt, aPayload} {
		if p.idx[r] == 0 {
			return fail(KindInvalid, attrName(r), "missing required field: "+attrName(r))
		}
	}
	if unknown > p.lim.MaxExtensions {
		return fail(KindLimit, "", strconv.Itoa(unknown)+" members outside the envelope schema, over the limit of "+strconv.Itoa(p.lim.MaxExtensions))
	}
	return nil
}

func wantKindD(m *member, k valKind, what string) *failure {
	if m.kind != k {
		return fail(KindInvalid, string(m.name), string(m.name)+" must be "+what+", not "+m.kind.String())
	}
	return nil
}

// stringD checks a string member, non-empty when the schema says minLength 1,
// and routes it to dst.
func (p *parser) stringD(m *member, nonEmpty bool, dst outField) *failure {
	if f := wantKindD(m, vString, "a string"); f != nil {
		return f
	}
	if nonEmpty && m.end-m.start == 2 {
		return fail(KindInvalid, string(m.name), string(m.name)+" must not be empty")
	}
	if dst != oNone {
		p.emit(dst, p.str(m))
	}
	return nil
}

func (p *parser) dateTimeD(m *member) *failure {
	if f := wantKindD(m, vString, "an RFC 3339 date-time string"); f != nil {
		return f
	}
	if !validDateTime(p.str(m)) {
		return fail(KindInvalid, string(m.name), string(m.name)+" must be an RFC 3339 date-time such as 2026-07-09T10:00:00Z; got "+quoteTrunc(p.str(m)))
	}
	return nil
}

func (p *parser) enumD(m *member, set []string) *failure {
	if m.kind == vString {
		v := p.str(m)
		for _, s := range set {
			if string(v) == s {
				return nil
			}
		}
	}
	return fail(KindInvalid, string(m.name), string(m.name)+" must be one of "+listOf(set)+"; got "+quoteTrunc(m.raw(p.b)))
}

// numberD checks a number >= 0, and <= max when max >= 0.
func (p *parser) numberD(m *member, max float64) *failure {
	if m.kind == vNumber {
		x, err := strconv.ParseFloat(string(m.raw(p.b)), 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
				x = -1
			}
		}
		if x >= 0 && (max < 0 || x <= max) {
			return nil
		}
	}
	want := "a number >= 0"
	if max >= 0 {
		want = "a number from 0 to " + strconv.FormatFloat(max, 'g', -1, 64)
	}
	return fail(KindInvalid, string(m.name), string(m.name)+" must be "+want+"; got "+quoteTrunc(m.raw(p.b)))
}

// validTypeD matches ^[a-z][a-z0-9]*(\.[a-z][a-z0-9_]*)+$ (envelope schema).
func validTypeD(t []byte) bool {
	segs := 0
	first := true // at the first byte of a segment
	for _, c := range t {
		switch {
		case c == '.':
			if first {
				return false
			}
			first = true
			segs++
			continue
		case first:
			if c < 'a' || c > 'z' {
				return false
			}
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '_' && segs > 0:
		default:
			return false
		}
		first = false
	}
	return segs > 0 && !first
}

// evidenceChainD checks evidence_chain: an array of objects, each with
// string members source and id.
func (p *parser) evidenceChainD(m *member) *failure {
	if f := wantKindD(m, vArray, "an array of {source, id} objects"); f != nil {
		return f
	}
	bad := func(k int, why string) *failure {
		return fail(KindInvalid, "evidence_chain", "evidence_chain["+strconv.Itoa(k)+"] "+why)
	}
	// The bytes were validated by the scan: only the shape is checked here.
	els := p.elements(m.start)
	for k := 0; ; k++ {
		e, ok := els.next()
		if !ok {
			return nil
		}
		if e.kind != vObject {
			return bad(k, "must be an object")
		}
		var src, id bool
		it := p.members(e.start)
		for {
			name, v, ok := it.next()
			if !ok {
				break
			}
			switch string(name) {
			case "source":
				src = v.kind == vString
				if !src {
					return bad(k, "source must be a string")
				}
			case "id":
				id = v.kind == vString
				if !id {
					return bad(k, "id must be a string")
				}
			}
		}
		if !src || !id {
			return bad(k, "needs string members source and id")
		}
	}
}

var deliveryModesD = [...]string{"best_effort", "at_least_once", "replayable"}

// deliveryD checks the delivery object of an event relayed from an upstream
// AEP hop against the envelope schema: an object whose mode, sequence and
// cursor, when present, are an enum, an integer >= 0 and a string; other
// members are allowed. The event is stored as received; a stream of this
// gateway replaces the member with its own when it delivers the event, which
// finds the member by its name as written, so a name written with escapes is
// refused (it would survive beside the gateway's own).
func (p *parser) deliveryD(m *member) *failure {
	if m.nameEsc {
		return fail(KindInvalid, "delivery", "the delivery member name must be written without escapes")
	}
	if f := wantKindD(m, vObject, "an object"); f != nil {
		return f
	}
	it := p.members(m.start)
	for {
		name, v, ok := it.next()
		if !ok {
			return nil
		}
		switch string(name) {
		case "mode":
			if !p.oneOf(v, deliveryModesD[:]) {
				return fail(KindInvalid, "delivery", "delivery.mode must be one of "+listOf(deliveryModesD[:])+"; got "+quoteTrunc(p.raw(v)))
			}
			for i := range deliveryModesD { // its aep-delivery-mode header (transport-kafka.md)
				if p.oneOf(v, deliveryModesD[i:i+1]) {
					p.emit(oDeliveryMode, []byte(deliveryModesD[i]))
					break
				}
			}
		case "sequence":
			if v.kind != vNumber || !nonNegIntegral(p.raw(v)) {
				return fail(KindInvalid, "delivery", "delivery.sequence must be an integer >= 0; got "+quoteTrunc(p.raw(v)))
			}
		case "cursor":
			if v.kind != vString {
				return fail(KindInvalid, "delivery", "delivery.cursor must be a string, not "+v.kind.String())
			}
		}
	}
}
