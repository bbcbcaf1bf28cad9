package transport_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// LoggerCache derives a key's logger once, even when many connections of
// the key ask at once, and each key's logger carries its own fields.
func TestLoggerCacheDerivesOncePerKey(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	base := zerolog.New(zerolog.SyncWriter(&buf))
	var lc transport.LoggerCache
	var builds sync.Map
	get := func(key string) zerolog.Logger {
		return lc.Get(key, func() zerolog.Logger {
			n, _ := builds.LoadOrStore(key, new(int))
			mu.Lock()
			*n.(*int)++
			mu.Unlock()
			return base.With().Str("tenant", key).Logger()
		})
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() { get([]string{"a", "b"}[i%2]) })
	}
	wg.Wait()
	a, b := get("a"), get("b")
	a.Info().Msg("x")
	b.Info().Msg("y")
	if out := buf.String(); !strings.Contains(out, `"tenant":"a","message":"x"`) || !strings.Contains(out, `"tenant":"b","message":"y"`) {
		t.Fatalf("fields: %s", out)
	}
	// Racing first calls may each build; only one is kept, so later calls
	// build nothing.
	before := map[string]int{}
	builds.Range(func(k, v any) bool { before[k.(string)] = *v.(*int); return true })
	get("a")
	get("b")
	builds.Range(func(k, v any) bool {
		if *v.(*int) != before[k.(string)] {
			t.Fatalf("%s derived again after it was cached", k)
		}
		return true
	})
}
