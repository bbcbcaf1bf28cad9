package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/cursor"
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
// key file and the JWKS file are reloaded when their content changes (a
// SHA-256 of the bytes, checked every --auth-reload-interval, so a rotation
// that keeps the size and puts the modification time back is seen) and on
// SIGHUP, which also refetches a JWKS URL.
//
// A half-written file never takes effect: the bytes hashed are the bytes
// parsed, the whole file is parsed before the keys are swapped, a file that
// does not parse is logged and counted (once per content) and the keys in
// use stay, and changed content takes effect only once it has stayed the
// same for authSettle (a second read), so a file written in steps is not
// taken between them. SIGHUP reloads at once. Its goroutine is stopped and
// waited for by Close, which also stops a JWKS URL's refreshes.
type authReloader struct {
	log     zerolog.Logger
	files   []*watchedFile
	urlKS   *gateway.JWKS // a URL key set, refetched on SIGHUP
	reloads *prometheus.CounterVec

	hup  chan os.Signal
	quit chan struct{}
	done chan struct{}
}

// authSettle is how long changed credentials must stay the same before
// they take effect (see authReloader).
const authSettle = 200 * time.Millisecond

// maxCredentialsFileBytes bounds a key or JWKS file read for a reload.
const maxCredentialsFileBytes = 16 << 20

// watchedFile is one credentials file. Its fields are the run goroutine's
// (check).
type watchedFile struct {
	flag, path string
	reload     func(raw []byte) (int, error) // parses raw and swaps it in; the number of keys now in use

	applied   [32]byte // digest of the content in use
	failed    [32]byte // digest of the last content that did not parse
	pending   [32]byte // digest of changed content waiting to settle
	pendingAt time.Time
}

// reloadable are the secrets the reloader keeps current; nil ones are
// not watched.
type reloadable struct {
	keys    *gateway.KeyStore
	jwt     *gateway.JWTVerifier
	cursors *cursor.Keyring // reloaded from --cursor-keys when given
	certs   *certSource     // --tls-cert-file and --tls-key-file
}

func startAuthReloader(cfg config, s reloadable, log zerolog.Logger, reg prometheus.Registerer) *authReloader {
	keys, jwt := s.keys, s.jwt
	r := &authReloader{log: log, hup: make(chan os.Signal, 1), quit: make(chan struct{}), done: make(chan struct{})}
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aep_auth_reloads_total",
		Help: "Reloads of a secrets file (--api-keys, --jwt-jwks-file, --cursor-keys, --tls-cert-file, --tls-key-file) by result: reloaded, or failed (the file did not parse or could not be read; the keys in use stay).",
	}, []string{"file", "result"})
	if reg != nil {
		reg.MustRegister(r.reloads)
	}
	if keys != nil {
		r.watch("--api-keys", cfg.APIKeys, func(raw []byte) (int, error) {
			next, err := gateway.ParseKeyStore(bytes.NewReader(raw))
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
			r.watch("--jwt-jwks-file", cfg.JWTJWKSFile, func(raw []byte) (int, error) {
				next, err := gateway.ParseJWKS(raw)
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
	if s.cursors != nil && cfg.CursorKeys != "" {
		r.watch("--cursor-keys", cfg.CursorKeys, func(raw []byte) (int, error) {
			next, err := parseCursorKeys(bytes.NewReader(raw))
			if err != nil {
				return 0, err
			}
			s.cursors.Replace(next)
			return 1, nil
		})
	}
	if s.certs != nil {
		r.watch("--tls-cert-file", s.certs.certPath, func(raw []byte) (int, error) { return s.certs.reload(raw, nil) })
		r.watch("--tls-key-file", s.certs.keyPath, func(raw []byte) (int, error) { return s.certs.reload(nil, raw) })
	}
	signal.Notify(r.hup, syscall.SIGHUP)
	go r.run(cfg.AuthReloadInterval)
	return r
}

func (r *authReloader) watch(flag, path string, reload func([]byte) (int, error)) {
	w := &watchedFile{flag: flag, path: path, reload: reload}
	for _, res := range []string{"reloaded", "failed"} {
		r.reloads.WithLabelValues(flag, res)
	}
	if raw, err := gateway.ReadFileLimited(path, maxCredentialsFileBytes); err == nil {
		w.applied = sha256.Sum256(raw) // what loadAuth just parsed
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
	var settle <-chan time.Time // armed while a change waits to settle
	for {
		select {
		case <-r.quit:
			return
		case <-tick:
			if r.check(false) && settle == nil {
				settle = time.After(authSettle)
			}
		case <-settle:
			settle = nil
			if r.check(false) {
				settle = time.After(authSettle)
			}
		case <-r.hup:
			r.log.Info().Msg("SIGHUP: reloading API keys, JWT keys, cursor keys and the TLS certificate")
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

// check reloads the files whose content changed and has settled (every
// file, at once, when force). It reports whether a change is still
// waiting to settle.
func (r *authReloader) check(force bool) (waiting bool) {
	now := time.Now()
	for _, w := range r.files {
		raw, err := gateway.ReadFileLimited(w.path, maxCredentialsFileBytes)
		if err != nil {
			r.reloads.WithLabelValues(w.flag, "failed").Inc()
			r.log.Error().Err(err).Str("flag", w.flag).Msg("credentials file unreadable; the keys in use stay")
			continue
		}
		sum := sha256.Sum256(raw)
		if !force {
			if sum == w.applied || sum == w.failed {
				w.pending = [32]byte{}
				continue
			}
			if sum != w.pending {
				w.pending, w.pendingAt = sum, now
				waiting = true
				continue
			}
			if now.Sub(w.pendingAt) < authSettle {
				waiting = true
				continue
			}
		}
		w.pending = [32]byte{}
		n, err := w.reload(raw)
		if err != nil {
			w.failed = sum
			r.reloads.WithLabelValues(w.flag, "failed").Inc()
			r.log.Error().Err(err).Str("flag", w.flag).Str("sha256", hex.EncodeToString(sum[:8])).Msg("credentials file not reloaded; the keys in use stay")
			continue
		}
		w.applied = sum
		r.reloads.WithLabelValues(w.flag, "reloaded").Inc()
		r.log.Info().Str("flag", w.flag).Int("keys", n).Str("sha256", hex.EncodeToString(sum[:8])).Msg("credentials reloaded")
	}
	return waiting
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
