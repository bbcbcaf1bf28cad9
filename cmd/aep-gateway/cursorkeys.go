package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/aep-gateway/aep-gateway/cursor"
)

// parseCursorKeys reads a cursor key file: one "<id> <hex secret>" per line
// (id 0-255, secret at least cursor.MinSecretLen bytes), '#' comments and
// blank lines ignored. The first key signs new cursors; every key verifies,
// so rotation is: add the new key first, keep the old ones until their
// cursors no longer matter.
func parseCursorKeys(r io.Reader) (*cursor.Keyring, error) {
	var keys []cursor.Key
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"<id> <hex secret>\"", line)
		}
		id, err := strconv.ParseUint(f[0], 10, 8)
		if err != nil {
			return nil, fmt.Errorf("line %d: key id must be 0-255", line)
		}
		secret, err := hex.DecodeString(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: secret must be hex", line)
		}
		keys = append(keys, cursor.Key{ID: uint8(id), Secret: secret})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return cursor.NewKeyring(keys[0], keys[1:]...)
}

// loadCursorKeys returns the keyring cursors are signed with:
//   - --cursor-keys FILE when given (what a multi-node deployment must use:
//     every node needs the same keys to resume each other's cursors);
//   - with the embedded broker, a key generated once and kept in
//     <data-dir>/cursor.key, so cursors survive restarts;
//   - otherwise a random key for this process only, with a warning.
func loadCursorKeys(c config, log zerolog.Logger) (*cursor.Keyring, error) {
	if c.CursorKeys != "" {
		raw, err := os.ReadFile(c.CursorKeys)
		if err != nil {
			return nil, fmt.Errorf("--cursor-keys: %w", err)
		}
		kr, err := parseCursorKeys(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("--cursor-keys %s: %w", c.CursorKeys, err)
		}
		return kr, nil
	}
	if c.embedded() {
		path := filepath.Join(c.DataDir, "cursor.key")
		raw, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			raw = []byte("0 " + randomSecret() + "\n")
			if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
				return nil, err
			}
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				return nil, fmt.Errorf("cursor key: %w", err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("cursor key: %w", err)
		}
		return parseCursorKeys(bytes.NewReader(raw))
	}
	log.Warn().Msg("no --cursor-keys: cursors are signed with a random key of this process; they will not resume on another node or after a restart")
	return parseCursorKeys(strings.NewReader("0 " + randomSecret()))
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
