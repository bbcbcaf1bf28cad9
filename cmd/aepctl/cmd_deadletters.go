package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// DeadLetter is one entry of GET /aep/dead-letters: where and when the
// gateway wrote it, and the event.dead_lettered envelope.
type DeadLetter struct {
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Time      time.Time `json:"time"`
	Event     struct {
		Payload struct {
			OriginalEventID string `json:"original_event_id"`
			SubscriptionID  string `json:"subscription_id"`
			Attempts        int    `json:"attempts"`
			LastError       struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"last_error"`
			OriginalEvent struct {
				Type string `json:"type"`
			} `json:"original_event"`
		} `json:"payload"`
	} `json:"event"`
}

// fetchDeadLetters reads the newest limit dead letters of the key's tenant;
// raw is the gateway's answer as it came.
func fetchDeadLetters(ctx context.Context, c *aepclient.Client, limit int) ([]DeadLetter, json.RawMessage, error) {
	var raw json.RawMessage
	if err := c.DoJSON(ctx, "GET", "/aep/dead-letters?limit="+strconv.Itoa(limit), nil, &raw); err != nil {
		return nil, nil, err
	}
	var out struct {
		DeadLetters []DeadLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, nil, fmt.Errorf("GET /aep/dead-letters: %w", err)
	}
	return out.DeadLetters, raw, nil
}

func cmdDeadLetters(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "dead-letters", "dead-letters [--limit N] [--output text|json]", stdout, stderr,
		"Lists the newest dead letters of the key's tenant, newest first (GET /aep/dead-letters):\nwhen, of which durable subscription, the original event's id and type, the\nattempts and the last error. --output json: the gateway's answer as it is.\n")
	var conn cli.ConnFlags
	conn.Register(fs)
	limit := fs.Int("limit", 20, "how many (1..100)")
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *limit < 1 || *limit > 100:
		return cli.UsageErr(fs, "--limit must be from 1 to 100")
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	dls, raw, err := fetchDeadLetters(ctx, &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}, *limit)
	if err != nil {
		return err
	}
	if *out == "json" {
		return cli.WriteJSONLine(stdout, raw)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEAD-LETTERED\tSUBSCRIPTION\tEVENT\tTYPE\tATTEMPTS\tLAST ERROR")
	for _, d := range dls {
		p := d.Event.Payload
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s: %s\n", d.Time.UTC().Format(time.RFC3339Nano), orDash(p.SubscriptionID),
			orDash(p.OriginalEventID), orDash(p.OriginalEvent.Type), p.Attempts, p.LastError.Code, p.LastError.Message)
	}
	return tw.Flush()
}
