package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
)

// WriteJSONLine writes v (raw JSON stays as it is) and a newline.
func WriteJSONLine(w io.Writer, v any) error {
	var b []byte
	if raw, ok := v.(json.RawMessage); ok {
		b = raw
	} else {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return err
		}
	}
	_, err := w.Write(append(TrimJSON(b), '\n'))
	return err
}

func TrimJSON(b []byte) []byte { return []byte(strings.TrimSpace(string(b))) }

// SplitList splits a comma-separated flag value; "" is no values.
func SplitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Main runs a command's run function with a context that ends on SIGINT or
// SIGTERM, and exits with the code it returns.
func Main(run func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// JSONOutput reports whether args ask for --output json (-o json,
// --output=json, ...): errors are then written as JSON too, so a script
// that reads JSON never has to parse text.
func JSONOutput(args []string) bool {
	for i, a := range args {
		if a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "o" && name != "output") {
			continue
		}
		if !hasVal && i+1 < len(args) {
			val = args[i+1]
		}
		if val == "json" {
			return true
		}
	}
	return false
}

// WriteError writes an error no other output reported: "prog: ..." on
// stderr, or with jsonOut one JSON object, {"error":{"message", "status",
// "code"}} (status and code when the gateway answered with an error).
func WriteError(stderr io.Writer, prog string, err error, jsonOut bool) {
	if !jsonOut {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return
	}
	e := map[string]any{"message": err.Error()}
	var apiErr *aepclient.APIError
	if errors.As(err, &apiErr) {
		e["status"] = apiErr.Status
		if apiErr.Code != "" {
			e["code"] = apiErr.Code
		}
	}
	_ = WriteJSONLine(stderr, map[string]any{"error": e})
}
