// Package cli is the command-line plumbing aepctl and aepbench share: flag
// sets with --help and usage errors (exit 2), --output, the connection flags
// --url/--token/--profile with the config file and environment behind them,
// and JSON-lines output.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
)

const DefaultURL = "http://127.0.0.1:8080"

// ErrUsage marks a usage error (exit 2); the message was already printed.
var ErrUsage = errors.New("usage error")

// NewFlagSet returns a flag set of the command prog (aepctl, aepbench) that
// reports errors instead of exiting, with a usage text that names the
// command; help, when given, is printed between the synopsis and the flags.
// -h/--help prints it to stdout; a usage error prints it to stderr after
// the error.
func NewFlagSet(prog, name, synopsis string, stdout, stderr io.Writer, help ...string) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s %s\n\n", prog, synopsis)
		for _, h := range help {
			fmt.Fprintf(w, "%s\n", h)
		}
		fmt.Fprintf(w, "Flags:\n")
		fs.PrintDefaults()
	}
	h := &helpFlag{out: stdout}
	fs.Var(h, "help", "show this help")
	fs.Var(h, "h", "show this help")
	return fs
}

// helpFlag is -h/--help: set, ParseFlags prints the usage to out.
type helpFlag struct {
	set bool
	out io.Writer
}

func (h *helpFlag) String() string   { return "" }
func (h *helpFlag) IsBoolFlag() bool { return true }
func (h *helpFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	h.set = b
	return err
}

// outputValue is an --output flag restricted to a set of formats.
type outputValue struct {
	v       string
	allowed []string
}

func (o *outputValue) String() string {
	if o == nil {
		return ""
	}
	return o.v
}

func (o *outputValue) Set(s string) error {
	if slices.Contains(o.allowed, s) {
		o.v = s
		return nil
	}
	return fmt.Errorf("want one of %s", strings.Join(o.allowed, ", "))
}

// OutputFlag registers --output (and -o) with default def among allowed.
func OutputFlag(fs *flag.FlagSet, def string, allowed ...string) *string {
	o := &outputValue{v: def, allowed: allowed}
	usage := "output format: " + strings.Join(allowed, ", ")
	fs.Var(o, "output", usage)
	fs.Var(o, "o", "short for --output")
	return &o.v
}

// ParseFlags parses args; a parse error is a usage error, --help is
// flag.ErrHelp (exit 0).
// Flags may follow arguments ("subscriptions get ID -o json"); after "--"
// everything is an argument.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		dash := slices.Index(args, "--")
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return err
			}
			return ErrUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if dash >= 0 && len(rest) == len(args)-dash-1 { // stopped at "--"
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	_ = fs.Parse(append([]string{"--"}, pos...)) // sets fs.Args
	if f := fs.Lookup("help"); f != nil {
		if h, ok := f.Value.(*helpFlag); ok && h.set {
			fs.SetOutput(h.out)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	return nil
}

// UsageErr prints msg and the usage text, and returns ErrUsage.
func UsageErr(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return ErrUsage
}

// ConnFlags are the flags every command that talks to the gateway has. The
// values are resolved by resolve after parsing: the command line, then the
// environment (AEPCTL_URL, AEPCTL_TOKEN), then the profile of the config
// file (config.go), then the default URL.
type ConnFlags struct {
	URL     string
	Token   string
	Profile string
	fs      *flag.FlagSet
}

func (c *ConnFlags) Register(fs *flag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.URL, "url", "", "gateway base URL (default $AEPCTL_URL, else the profile's url, else "+DefaultURL+")")
	fs.StringVar(&c.Token, "token", "", "API key sent as a bearer token (default $AEPCTL_TOKEN, else the profile's token; none in dev mode)")
	fs.StringVar(&c.Profile, "profile", "", "profile of the config file (default $AEPCTL_PROFILE, else \"default\"); see \"aepctl help config\"")
}

// resolve fills url and token from the first source that sets them. A
// profile named by --profile or $AEPCTL_PROFILE must exist.
func (c *ConnFlags) Resolve() error {
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	name, explicit := c.Profile, set["profile"]
	if !explicit {
		if env := os.Getenv(EnvProfile); env != "" {
			name, explicit = env, true
		} else {
			name = "default"
		}
	}
	prof, err := LoadProfile(ConfigPath(), name, explicit)
	if err != nil {
		return err
	}
	c.URL, err = GatewayURL(firstNonEmpty(pick(set["url"], c.URL), os.Getenv(EnvURL), prof.URL, DefaultURL))
	if err != nil {
		return err
	}
	if !set["token"] { // an explicit --token "" means no token
		c.Token = firstNonEmpty(os.Getenv(EnvToken), prof.Token)
	}
	return nil
}

// GatewayURL checks a gateway base URL: a bare host:port (127.0.0.1:8080,
// localhost:8080) means http://host:port, as curl reads it; otherwise the
// scheme must be http or https and the URL must name a host.
func GatewayURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("gateway URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("gateway URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("gateway URL %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("gateway URL %q: a base URL has no query or fragment", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

func pick(set bool, v string) string {
	if set {
		return v
	}
	return ""
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// DialectFlag parses --dialect: "r", "d", or "" (detect).
func DialectFlag(s string) (aep.Dialect, bool) {
	switch strings.ToLower(s) {
	case "":
		return aep.DialectUnknown, true
	case "r":
		return aep.DialectR, true
	case "d":
		return aep.DialectD, true
	}
	return aep.DialectUnknown, false
}

// IsTerminal reports whether w is a character device (a terminal), the
// default for progress output.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
