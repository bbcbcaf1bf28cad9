package dialectd

import (
	"net/http"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway/engine"
)

// sinceParam reads the stream's since parameter (an extension, not in the
// spec: start the replay at the events the gateway wrote in that last
// stretch of time, engine.OffsetsAfter). It needs the replayable mode,
// which it implies when no mode is given, and no from_cursor; a
// Last-Event-ID wins over it, as over from_cursor.
// It writes the refusal and returns false on a bad one; 0 means absent.
func sinceParam(w http.ResponseWriter, r *http.Request, st *streamState) (time.Duration, bool) {
	q := r.URL.Query()
	if !q.Has("since") {
		return 0, true
	}
	det := map[string]string{"field": "since"}
	d, err := engine.ParseSince(q.Get("since"))
	switch {
	case err != nil:
		reject(w, err.Error(), det)
		return 0, false
	case st.from != "":
		reject(w, "since cannot be combined with from_cursor", det)
		return 0, false
	case st.mode != "" && st.mode != ModeReplayable:
		reject(w, "since requires delivery_mode replayable", det)
		return 0, false
	}
	st.mode = ModeReplayable
	if r.Header.Get("Last-Event-ID") != "" {
		// an EventSource reconnecting to its URL: the cursor it sends
		// resumes exactly
		return 0, true
	}
	return d, true
}
