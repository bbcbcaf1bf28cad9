package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/gateway"
)

// loadJWKS builds the key set of --jwt-jwks-url (fetched now, then every
// --jwt-jwks-refresh) or --jwt-jwks-file.
func loadJWKS(cfg config) (*gateway.JWKS, error) {
	if cfg.JWTJWKSURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		set, err := gateway.NewJWKSURL(ctx, cfg.JWTJWKSURL, nil, cfg.JWTJWKSRefresh)
		if err != nil {
			return nil, fmt.Errorf("--jwt-jwks-url: %w", err)
		}
		return set, nil
	}
	return gateway.LoadJWKSFile(cfg.JWTJWKSFile)
}

// authReloader keeps the credentials current without a restart: the API
// key file and the JWKS file are reloaded when their modification time or
// size changes (checked every --auth-reload-interval) and on SIGHUP, which
// also refetches a JWKS URL. A file that no longer parses is logged and
// the keys in use stay. Its goroutine is stopped and waited for by Close,
// which also stops a JWKS URL's refreshes.
type authReloader struct {
	log   zerolog.Logger
	files []*watchedFile
	urlKS *gateway.JWKS // a URL key set, refetched on SIGHUP

	hup  chan os.Signal
	quit chan struct{}
	done chan struct{}
}

type watchedFile struct {
	flag, path string
	mod        time.Time
	size       int64
	reload     func() (int, error) // returns the number of keys now in use
}

func startAuthReloader(cfg config, keys *gateway.KeyStore, jwt *gateway.JWTVerifier, log zerolog.Logger) *authReloader {
	r := &authReloader{log: log, hup: make(chan os.Signal, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if keys != nil {
		r.watch("--api-keys", cfg.APIKeys, func() (int, error) {
			next, err := gateway.LoadKeyStore(cfg.APIKeys)
			if err != nil {
				return 0, err
			}
			keys.Replace(next)
			return keys.Len(), nil
		})
	}
	if jwt != nil && jwt.JWKS() != nil {
		set := jwt.JWKS()
		if cfg.JWTJWKSFile != "" {
			r.watch("--jwt-jwks-file", cfg.JWTJWKSFile, func() (int, error) {
				next, err := gateway.LoadJWKSFile(cfg.JWTJWKSFile)
				if err != nil {
					return 0, err
				}
				set.Replace(next)
				return set.Len(), nil
			})
		} else {
			r.urlKS = set
		}
	}
	signal.Notify(r.hup, syscall.SIGHUP)
	go r.run(cfg.AuthReloadInterval)
	return r
}

func (r *authReloader) watch(flag, path string, reload func() (int, error)) {
	w := &watchedFile{flag: flag, path: path, reload: reload}
	if st, err := os.Stat(path); err == nil {
		w.mod, w.size = st.ModTime(), st.Size()
	}
	r.files = append(r.files, w)
}

func (r *authReloader) run(every time.Duration) {
	defer close(r.done)
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-r.quit:
			return
		case <-tick:
			r.check(false)
		case <-r.hup:
			r.log.Info().Msg("SIGHUP: reloading API keys and JWT keys")
			r.check(true)
			if r.urlKS != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				if err := r.urlKS.Refresh(ctx, true); err != nil {
					r.log.Error().Err(err).Msg("--jwt-jwks-url: refetch failed; the keys in use stay")
				}
				cancel()
			}
		}
	}
}

// check reloads the files that changed (every file when force).
func (r *authReloader) check(force bool) {
	for _, w := range r.files {
		st, err := os.Stat(w.path)
		if err != nil {
			r.log.Error().Err(err).Str("flag", w.flag).Msg("credentials file unreadable; the keys in use stay")
			continue
		}
		if !force && st.ModTime().Equal(w.mod) && st.Size() == w.size {
			continue
		}
		w.mod, w.size = st.ModTime(), st.Size()
		n, err := w.reload()
		if err != nil {
			r.log.Error().Err(err).Str("flag", w.flag).Msg("credentials file not reloaded; the keys in use stay")
			continue
		}
		r.log.Info().Str("flag", w.flag).Int("keys", n).Msg("credentials reloaded")
	}
}

// Close stops reloading and a JWKS URL's refreshes, and waits for them.
func (r *authReloader) Close() {
	signal.Stop(r.hup)
	close(r.quit)
	<-r.done
	if r.urlKS != nil {
		r.urlKS.Close()
	}
}
