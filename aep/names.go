package aep

// attr names a top-level member known to either dialect.
type attr uint8

const (
	aUnknown attr = iota

	// Dialect R context attributes (AEP-0001 §5.1); id, type and source are
	// shared with D.
	aAep
	aID
	aType
	aSubject
	aTime
	aSource
	aAgent
	aSession
	aRun
	aStep
	aSeq
	aEpoch
	aCause
	aTraceparent
	aSeverity
	aCapture
	aData

	// Dialect D envelope members (schemas/aep-envelope.schema.json).
	aAepVersion
	aCreatedAt
	aPayload
	aTarget
	aTopic
	aSessionID
	aConversationID
	aTaskID
	aCorrelationID
	aCausationID
	aExpiresAt
	aDelivery
	aPayloadSchema
	aBeliefStatus
	aBeliefScope
	aConfidence
	aValidFrom
	aValidUntil
	aStaleAfter
	aRefreshHint
	aDelegatedBy
	aDelegatedTo
	aParentTaskID
	aHandoffToken
	aCheckpointID
	aCheckpointAt
	aInterruptionPolicy
	aCompensationID
	aEvidenceChain
	aSourceTrust
	aAttestationCount
	aDataProvenance

	numAttrs
)

// isR reports whether a is a context attribute of dialect R.
func (a attr) isR() bool { return a >= aAep && a <= aData }

// isD reports whether a is a member named by dialect D's envelope schema.
func (a attr) isD() bool {
	return a == aID || a == aType || a == aSource || (a >= aAepVersion && a < numAttrs)
}

// lookupAttr classifies a member name. The switch on string(name) does not
// allocate.
func lookupAttr(name []byte) attr {
	switch string(name) {
	case "aep":
		return aAep
	case "id":
		return aID
	case "type":
		return aType
	case "subject":
		return aSubject
	case "time":
		return aTime
	case "source":
		return aSource
	case "agent":
		return aAgent
	case "session":
		return aSession
	case "run":
		return aRun
	case "step":
		return aStep
	case "seq":
		return aSeq
	case "epoch":
		return aEpoch
	case "cause":
		return aCause
	case "traceparent":
		return aTraceparent
	case "severity":
		return aSeverity
	case "capture":
		return aCapture
	case "data":
		return aData
	case "aep_version":
		return aAepVersion
	case "created_at":
		return aCreatedAt
	case "payload":
		return aPayload
	case "target":
		return aTarget
	case "topic":
		return aTopic
	case "session_id":
		return aSessionID
	case "conversation_id":
		return aConversationID
	case "task_id":
		return aTaskID
	case "correlation_id":
		return aCorrelationID
	case "causation_id":
		return aCausationID
	case "expires_at":
		return aExpiresAt
	case "delivery":
		return aDelivery
	case "payload_schema":
		return aPayloadSchema
	case "belief_status":
		return aBeliefStatus
	case "belief_scope":
		return aBeliefScope
	case "confidence":
		return aConfidence
	case "valid_from":
		return aValidFrom
	case "valid_until":
		return aValidUntil
	case "stale_after":
		return aStaleAfter
	case "refresh_hint":
		return aRefreshHint
	case "delegated_by":
		return aDelegatedBy
	case "delegated_to":
		return aDelegatedTo
	case "parent_task_id":
		return aParentTaskID
	case "handoff_token":
		return aHandoffToken
	case "checkpoint_id":
		return aCheckpointID
	case "checkpoint_at":
		return aCheckpointAt
	case "interruption_policy":
		return aInterruptionPolicy
	case "compensation_id":
		return aCompensationID
	case "evidence_chain":
		return aEvidenceChain
	case "source_trust":
		return aSourceTrust
	case "attestation_count":
		return aAttestationCount
	case "data_provenance":
		return aDataProvenance
	}
	return aUnknown
}

// attrNames are the wire names of the known attributes, indexed by attr.
var attrNames = [numAttrs]string{
	aAep: "aep", aID: "id", aType: "type", aSubject: "subject", aTime: "time",
	aSource: "source", aAgent: "agent", aSession: "session", aRun: "run",
	aStep: "step", aSeq: "seq", aEpoch: "epoch", aCause: "cause",
	aTraceparent: "traceparent", aSeverity: "severity", aCapture: "capture",
	aData:       "data",
	aAepVersion: "aep_version", aCreatedAt: "created_at", aPayload: "payload",
	aTarget: "target", aTopic: "topic", aSessionID: "session_id",
	aConversationID: "conversation_id", aTaskID: "task_id",
	aCorrelationID: "correlation_id", aCausationID: "causation_id",
	aExpiresAt: "expires_at", aDelivery: "delivery",
	aPayloadSchema: "payload_schema", aBeliefStatus: "belief_status",
	aBeliefScope: "belief_scope", aConfidence: "confidence",
	aValidFrom: "valid_from", aValidUntil: "valid_until",
	aStaleAfter: "stale_after", aRefreshHint: "refresh_hint",
	aDelegatedBy: "delegated_by", aDelegatedTo: "delegated_to",
	aParentTaskID: "parent_task_id", aHandoffToken: "handoff_token",
	aCheckpointID: "checkpoint_id", aCheckpointAt: "checkpoint_at",
	aInterruptionPolicy: "interruption_policy", aCompensationID: "compensation_id",
	aEvidenceChain: "evidence_chain", aSourceTrust: "source_trust",
	aAttestationCount: "attestation_count", aDataProvenance: "data_provenance",
}

func attrName(a attr) string { return attrNames[a] }
