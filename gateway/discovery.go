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
	Capabilities map[string]any    `json:"capabilities"`
}

func (s *Server) handleDiscovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, discovery{
		AEP:          aep.SupportedVersions(aep.DialectR),
		Role:         "collector",
		Endpoints:    map[string]string{"events": "/events"},
		Capabilities: map[string]any{"experimental": map[string]any{}},
	})
}
