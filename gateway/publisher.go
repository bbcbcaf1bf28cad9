package gateway

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// publisher is who publishes a request's events and how, as every record
// it writes says in its headers (docs/record-format.md): the principal the
// credential names, how it authenticated, and the binding it came over.
// An audit record is assembled from these and the event's own headers.
type publisher struct {
	id     []byte // the principal's id; empty in development mode
	method []byte // principal.Method
	via    string // "http" or "ws"
}

// publisherHeaders is how many headers appendHeaders adds at most.
const publisherHeaders = 3

// via values.
const (
	viaHTTP = "http"
	viaWS   = "ws"
)

// publisherOf is t's principal publishing over via. The byte slices are
// made once per request and shared by its records (Kafka only reads them).
func publisherOf(t tenant.Tenant, via string) publisher {
	p := t.Principal()
	pub := publisher{method: []byte(principal.MethodNone), via: via}
	if p != nil {
		pub.id, pub.method = []byte(p.ID), []byte(p.Method)
	}
	return pub
}

// appendHeaders appends the publisher's headers to hs.
func (p publisher) appendHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	if len(p.id) > 0 {
		hs = append(hs, kgo.RecordHeader{Key: partitioning.HeaderPrincipal, Value: p.id})
	}
	if len(p.method) > 0 {
		hs = append(hs, kgo.RecordHeader{Key: partitioning.HeaderAuth, Value: p.method})
	}
	if p.via != "" {
		hs = append(hs, kgo.RecordHeader{Key: partitioning.HeaderVia, Value: viaBytes(p.via)})
	}
	return hs
}

var (
	viaHTTPBytes = []byte(viaHTTP)
	viaWSBytes   = []byte(viaWS)
)

// viaBytes shares one slice per binding name.
func viaBytes(via string) []byte {
	switch via {
	case viaHTTP:
		return viaHTTPBytes
	case viaWS:
		return viaWSBytes
	}
	return []byte(via)
}
