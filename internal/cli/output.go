package cli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
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
