package transport

import (
	"encoding/json"
	"net/http"
)

// WriteJSON writes v as the JSON body of a response with status, not to be
// cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
