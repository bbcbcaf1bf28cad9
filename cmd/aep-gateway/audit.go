package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/sealer"
	"github.com/aep-gateway/aep-gateway/internal/auditlog"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// roleSealer runs only the audit sealer.
const roleSealer = "sealer"

// sealHere says whether this process runs the audit sealer.
func (c config) sealHere() bool {
	switch {
	case c.Role == roleSealer:
		return true
	case c.Role == roleWorker || c.Role == roleBridge:
		return false
	case c.AuditSeal == "on":
		return true
	case c.AuditSeal == "auto":
		return c.embedded()
	}
	return false
}

// auditKeys loads the signing key (created in the data directory with the
// embedded broker when none is named) and the published key set: the
// signer's key and --audit-public-keys. Both nil when the process neither
// seals nor names a key.
func auditKeys(cfg config, log zerolog.Logger) (*auditlog.Signer, []byte, error) {
	var signer *auditlog.Signer
	var err error
	switch {
	case cfg.AuditSigningKey != "":
		signer, err = auditlog.LoadSigner(cfg.AuditSigningKey)
	case cfg.sealHere() && cfg.embedded():
		path := filepath.Join(cfg.DataDir, "audit-signing.key")
		var created bool
		if err = os.MkdirAll(cfg.DataDir, 0o700); err == nil {
			signer, created, err = auditlog.LoadOrCreateSigner(path)
		}
		if created {
			log.Warn().Str("path", path).Str("key_id", signer.KeyID()).
				Msg("audit: created a signing key for the checkpoints; keep it (and a copy of its public key) to verify them later")
		}
	}
	if err != nil {
		return nil, nil, err
	}
	keys := auditlog.Keys{}
	if cfg.AuditPublicKeys != "" {
		b, err := os.ReadFile(cfg.AuditPublicKeys)
		if err != nil {
			return nil, nil, fmt.Errorf("--audit-public-keys: %w", err)
		}
		if keys, err = auditlog.ParseKeys(b); err != nil {
			return nil, nil, fmt.Errorf("--audit-public-keys: %w", err)
		}
	}
	active := ""
	if signer != nil {
		keys.Add(signer.Public())
		active = signer.KeyID()
	}
	if len(keys) == 0 {
		return nil, nil, nil
	}
	doc, err := json.Marshal(keys.Doc(active))
	return signer, doc, err
}

// startSealer runs the audit sealer until lc stops it; the channel yields
// its error if it stops by itself.
func startSealer(cfg config, opts []kgo.Opt, naming partitioning.Naming, signer *auditlog.Signer, published []byte,
	reg prometheus.Registerer, log zerolog.Logger, lc *lifecycle) (<-chan error, error) {
	keys, err := auditlog.ParseKeys(published)
	if err != nil {
		return nil, err
	}
	s, err := sealer.New(sealer.Config{ClientOpts: opts, Naming: naming, TopicRegexp: filterworker.TopicRegexp(naming),
		Signer: signer, Keys: keys, Group: cfg.AuditGroup, Interval: cfg.AuditInterval,
		ReplicationFactor: int16(cfg.TopicReplicationFactor), RetentionBytes: auditRetentionBytes(cfg), Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	failed := runOwned("audit sealer", s.Run, lc)
	return failed, nil
}

// auditRetentionBytes bounds the audit topics on the embedded broker (its
// disk and restart memory are bounded: embeddedBounds); on a real cluster
// they keep everything (docs/audit.md, "Retention").
func auditRetentionBytes(cfg config) int64 {
	if !cfg.embedded() {
		return 0
	}
	return cfg.embeddedBounds().AuditBytes
}
