package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables read by aepctl.
const (
	envURL     = "AEPCTL_URL"
	envToken   = "AEPCTL_TOKEN"
	envProfile = "AEPCTL_PROFILE"
	envConfig  = "AEPCTL_CONFIG"
)

// maxConfigBytes bounds the config file read.
const maxConfigBytes = 1 << 20

const configHelp = `aepctl config file

Location: $AEPCTL_CONFIG, else $XDG_CONFIG_HOME/aepctl/config (on Linux usually
~/.config/aepctl/config). A missing file is fine unless a profile is asked for.

Format: named profiles, one "key = value" a line, "#" starts a comment line:

  [default]
  url = http://127.0.0.1:8080

  [prod]
  url = https://aep.example.com
  token = ak_live_...

Keys: url (gateway base URL), token (API key sent as a bearer token).
The profile is --profile NAME, else $AEPCTL_PROFILE, else "default".
Precedence for each value: the command line, then the environment
($AEPCTL_URL, $AEPCTL_TOKEN), then the profile, then the built-in default
(http://127.0.0.1:8080, no token). Keep the file private (chmod 600) when it
holds tokens.
`

// profile is one section of the config file.
type profile struct {
	URL   string
	Token string
}

// configPath is where the config file is looked for.
func configPath() string {
	if p := os.Getenv(envConfig); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "aepctl", "config")
}

// loadProfile reads profile name from the file at path. A missing file or
// profile is an empty profile unless required.
func loadProfile(path, name string, required bool) (profile, error) {
	if path == "" {
		if required {
			return profile{}, fmt.Errorf("profile %q: no config file location (set $%s)", name, envConfig)
		}
		return profile{}, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return profile{}, nil
	}
	if err != nil {
		return profile{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	profs, err := parseConfig(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return profile{}, fmt.Errorf("config %s: %w", path, err)
	}
	p, ok := profs[name]
	if !ok && required {
		return profile{}, fmt.Errorf("config %s: no profile [%s]", path, name)
	}
	return p, nil
}

// parseConfig reads the profiles of a config file; an unknown key, a line
// outside a section or a repeated section is an error with its line number.
func parseConfig(r io.Reader) (map[string]profile, error) {
	profs := map[string]profile{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxConfigBytes)
	section, n, read := "", 0, 0
	for sc.Scan() {
		n++
		read += len(sc.Bytes()) + 1
		if read > maxConfigBytes {
			return nil, fmt.Errorf("longer than %d bytes", maxConfigBytes)
		}
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") || len(line) < 3 {
				return nil, fmt.Errorf("line %d: a section is [name]", n)
			}
			section = strings.TrimSpace(line[1 : len(line)-1])
			if _, dup := profs[section]; dup {
				return nil, fmt.Errorf("line %d: profile [%s] appears twice", n, section)
			}
			profs[section] = profile{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want key = value", n)
		}
		if section == "" {
			return nil, fmt.Errorf("line %d: %q is outside a [profile] section", n, strings.TrimSpace(k))
		}
		p := profs[section]
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch strings.TrimSpace(k) {
		case "url":
			p.URL = v
		case "token":
			p.Token = v
		default:
			return nil, fmt.Errorf("line %d: unknown key %q (want url or token)", n, strings.TrimSpace(k))
		}
		profs[section] = p
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: too long", n+1)
		}
		return nil, err
	}
	return profs, nil
}
