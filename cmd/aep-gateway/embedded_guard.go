package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/connlimit"
)

// persistentListener wraps the embedded broker's listener so that accept
// errors (EMFILE when the process is out of descriptors) are backed off
// and retried: kfake's accept loop returns on the first error it sees and
// never listens again.
func persistentListener(ln net.Listener, log zerolog.Logger) net.Listener {
	return connlimit.New(ln, connlimit.Config{OnAcceptError: func(err error, backoff time.Duration) {
		log.Warn().Err(err).Dur("backoff", backoff).Str("component", "embedded-kafka").Msg("accept failed; retrying")
	}})
}

// privateDataDir creates dir (and tightens an existing one) so that only
// the gateway's user can read the embedded broker's data: dir itself
// 0700, and what the gateway keeps in it (the broker's kafka/ tree, the
// offsets journal, the cursor key) 0700 for directories and 0600 for
// files. Other entries of dir are left alone (--data-dir may be shared).
// Files the broker creates later are 0600 through the process umask
// (restrictUmask).
func privateDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	restrictUmask()
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("data dir permissions: %w", err)
	}
	for _, name := range []string{"kafka", "offsets.json", "cursor.key"} {
		if err := tighten(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("data dir permissions: %w", err)
		}
	}
	return nil
}

// tighten makes the tree at root 0700 (directories) and 0600 (files); a
// missing root is fine.
func tighten(root string) error {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		mode := os.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		return os.Chmod(path, mode)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Ping reports whether the embedded broker accepts a new connection and
// answers an ApiVersions request on it: the readiness of a broker whose
// listener may have stopped while the gateway's existing connections
// still work.
func (b *embeddedBroker) Ping(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", b.addr)
	if err != nil {
		return fmt.Errorf("embedded kafka: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 0
	const corr = 1
	msg := kmsg.NewRequestFormatter(kmsg.FormatterClientID("aep-gateway-ready")).AppendRequest(nil, req, corr)
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("embedded kafka: %w", err)
	}
	var hdr [8]byte // size, correlation id
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("embedded kafka: no ApiVersions answer: %w", err)
	}
	size := int32(binary.BigEndian.Uint32(hdr[:4]))
	if size < 4 || size > 1<<20 || binary.BigEndian.Uint32(hdr[4:]) != corr {
		return errors.New("embedded kafka: malformed ApiVersions answer")
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(c, body); err != nil {
		return fmt.Errorf("embedded kafka: %w", err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	if err := resp.ReadFrom(body); err != nil {
		return fmt.Errorf("embedded kafka: ApiVersions answer: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("embedded kafka: ApiVersions: %w", err)
	}
	return nil
}

// pingAll is ready when every pinger is: the gateway's Kafka client and,
// with the embedded broker, the broker's own listener.
type pingAll []gateway.Pinger

func (p pingAll) Ping(ctx context.Context) error {
	for _, x := range p {
		if err := x.Ping(ctx); err != nil {
			return err
		}
	}
	return nil
}
