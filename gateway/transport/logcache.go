package transport

import (
	"sync"

	"github.com/rs/zerolog"
)

// maxCachedLoggers bounds a LoggerCache: past it, loggers are derived
// afresh (and not kept), as before the cache.
const maxCachedLoggers = 4096

// LoggerCache hands out one derived logger per key (a tenant's name), so
// that the connections of a tenant share its fields instead of each
// holding a copy: zerolog's With allocates a 500-byte context per logger,
// which every parked connection paid for. The zero value is ready; safe
// for concurrent use.
type LoggerCache struct {
	mu sync.Mutex
	m  map[string]zerolog.Logger // guarded by mu
}

// Get returns key's logger, derived with build the first time.
func (lc *LoggerCache) Get(key string, build func() zerolog.Logger) zerolog.Logger {
	lc.mu.Lock()
	l, ok := lc.m[key]
	lc.mu.Unlock()
	if ok {
		return l
	}
	l = build()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if prev, ok := lc.m[key]; ok {
		return prev
	}
	if len(lc.m) < maxCachedLoggers {
		if lc.m == nil {
			lc.m = map[string]zerolog.Logger{}
		}
		lc.m[key] = l
	}
	return l
}
