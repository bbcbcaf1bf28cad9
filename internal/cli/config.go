package cli

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
	EnvURL     = "AEPCTL_URL"
	EnvToken   = "AEPCTL_TOKEN"
	EnvProfile = "AEPCTL_PROFILE"
	EnvConfig  = "AEPCTL_CONFIG"
)

// MaxConfigBytes bounds the config file read.
const MaxConfigBytes = 1 << 20

const ConfigHelp = `aepctl config file

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

// Profile is one section of the config file.
type Profile struct {
	URL   string
	Token string
}

// ConfigPath is where the config file is looked for.
func ConfigPath() string {
	if p := os.Getenv(EnvConfig); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "aepctl", "config")
}

// LoadProfile reads profile name from the file at path. A missing file or
// profile is an empty profile unless required.
func LoadProfile(path, name string, required bool) (Profile, error) {
	if path == "" {
		if required {
			return Profile{}, fmt.Errorf("profile %q: no config file location (set $%s)", name, EnvConfig)
		}
		return Profile{}, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return Profile{}, nil
	}
	if err != nil {
		return Profile{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	profs, err := ParseConfig(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return Profile{}, fmt.Errorf("config %s: %w", path, err)
	}
	p, ok := profs[name]
	if !ok && required {
		return Profile{}, fmt.Errorf("config %s: no profile [%s]", path, name)
	}
	return p, nil
}

// ParseConfig reads the profiles of a config file; an unknown key, a line
// outside a section or a repeated section is an error with its line number.
func ParseConfig(r io.Reader) (map[string]Profile, error) {
	profs := map[string]Profile{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), MaxConfigBytes)
	section, n, read := "", 0, 0
	for sc.Scan() {
		n++
		read += len(sc.Bytes()) + 1
		if read > MaxConfigBytes {
			return nil, fmt.Errorf("longer than %d bytes", MaxConfigBytes)
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
			profs[section] = Profile{}
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
