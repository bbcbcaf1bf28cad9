package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aep-gateway/aep-gateway/aep"
)

const defaultURL = "http://127.0.0.1:8080"

// newFlagSet returns a flag set that reports errors instead of exiting, with
// a usage text that names the command.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aepctl %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; a parse error is a usage error, --help is
// flag.ErrHelp (exit 0).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	return nil
}

// usageErr prints msg and the usage text, and returns errUsage.
func usageErr(fs *flag.FlagSet, format string, a ...any) error {
	fmt.Fprintf(fs.Output(), "aepctl %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return errUsage
}

// connFlags are the flags every command that talks to the gateway has; their
// defaults come from AEPCTL_URL and AEPCTL_TOKEN.
type connFlags struct {
	url   string
	token string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("AEPCTL_URL")
	if def == "" {
		def = defaultURL
	}
	fs.StringVar(&c.url, "url", def, "gateway base URL [$AEPCTL_URL]")
	fs.StringVar(&c.token, "token", os.Getenv("AEPCTL_TOKEN"), "API key sent as a bearer token (none in dev mode) [$AEPCTL_TOKEN]")
}

// dialectFlag parses --dialect: "r", "d", or "" (detect).
func dialectFlag(s string) (aep.Dialect, bool) {
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
