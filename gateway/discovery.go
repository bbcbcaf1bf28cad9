package gateway

import (
	"net/http"

	"github.com/aep-gateway/aep-gateway/aep"
)

// discovery is dialect R's discovery document (AEP-0003 §3.4). It
// advertises only what this gateway serves: endpoints and capabilities are
// added here as their bindings are implemented, never before.
type discovery struct {
	AEP          []string          `json:"aep"`
	Role         string            `json:"role"`
	Endpoints    map[string]string `json:"endpoints"`
	Capabilities any               `json:"capabilities"`
}

// AdvertiseR adds a dialect R binding's endpoints (name → path, e.g.
// "stream": "/stream") and capabilities (AEP-0003 §4 shape, replacing the
// defaults) to the discovery document. Call it before serving, only for
// bindings that are mounted.
func (s *Server) AdvertiseR(endpoints map[string]string, capabilities any) {
	for k, v := range endpoints {
		s.discoEndpoints[k] = v
	}
	if capabilities != nil {
		s.discoCaps = capabilities
	}
}

func (s *Server) handleDiscovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, discovery{
		AEP:          aep.SupportedVersions(aep.DialectR),
		Role:         "collector",
		Endpoints:    s.discoEndpoints,
		Capabilities: s.discoCaps,
	})
}
