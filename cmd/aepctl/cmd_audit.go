package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

// AuditRecord is GET /aep/audit/events/{id}: security.md's minimum audit
// record of one event.
type AuditRecord struct {
	Event struct {
		ID        string    `json:"id"`
		Type      string    `json:"type"`
		Source    string    `json:"source"`
		Target    string    `json:"target"`
		CreatedAt string    `json:"created_at"`
		Partition int32     `json:"partition"`
		Offset    int64     `json:"offset"`
		Appended  time.Time `json:"appended_at"`
	} `json:"event"`
	Published struct {
		Principal      string `json:"principal"`
		Auth           string `json:"auth"`
		Via            string `json:"via"`
		EventPrincipal string `json:"event_principal"`
	} `json:"published"`
	Deliveries []struct {
		SubscriptionID string `json:"subscription_id"`
		Status         string `json:"status"`
		Committed      int64  `json:"committed"`
		Attempts       int    `json:"attempts"`
		LastError      string `json:"last_error"`
	} `json:"deliveries"`
	Scanned             int  `json:"scanned"`
	DeadLettersComplete bool `json:"dead_letters_complete"`
}

// fetchAudit reads the audit record of event id; partition < 0 searches every
// partition. raw is the gateway's answer as it came.
func fetchAudit(ctx context.Context, c *aepclient.Client, id string, partition int, maxRecords int) (*AuditRecord, json.RawMessage, error) {
	q := url.Values{}
	if partition >= 0 {
		q.Set("partition", strconv.Itoa(partition))
	}
	if maxRecords > 0 {
		q.Set("max_records", strconv.Itoa(maxRecords))
	}
	path := "/aep/audit/events/" + url.PathEscape(id)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var raw json.RawMessage
	if err := c.DoJSON(ctx, "GET", path, nil, &raw); err != nil {
		return nil, nil, err
	}
	var out AuditRecord
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	return &out, raw, nil
}

func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "audit", "audit EVENT_ID [--partition N] [--max-records N] [--output text|json]", stdout, stderr,
		"Shows the audit record of one event of the key's tenant (GET /aep/audit/events/{id},\n"+
			"a tenant-wide key): its id, type, source, target and created_at, where it is in\n"+
			"the log, who published it and how (principal, authentication, binding), and its\n"+
			"delivery status in every durable subscription whose filter matches it. The log\n"+
			"has no index by event id: give --partition (the ingest answer's position) to\n"+
			"read one partition instead of all.\n")
	var conn cli.ConnFlags
	conn.Register(fs)
	partition := fs.Int("partition", -1, "the event's partition (-1: search every partition)")
	maxRecords := fs.Int("max-records", 0, "read at most this many records per topic (0: the gateway's default, 1,000,000)")
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.UsageErr(fs, "want one EVENT_ID")
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	rec, raw, err := fetchAudit(ctx, &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}, fs.Arg(0), *partition, *maxRecords)
	if err != nil {
		return err
	}
	if *out == "json" {
		return cli.WriteJSONLine(stdout, raw)
	}
	e, p := rec.Event, rec.Published
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, row := range [][2]string{
		{"id", e.ID}, {"type", e.Type}, {"source", e.Source}, {"target", orDash(e.Target)}, {"created_at", orDash(e.CreatedAt)},
		{"position", fmt.Sprintf("partition %d, offset %d, appended %s", e.Partition, e.Offset, e.Appended.Format(time.RFC3339Nano))},
		{"transport identity", orDash(p.Via)},
		{"auth identity", fmt.Sprintf("%s (%s)", orDash(p.Principal), orDash(p.Auth))},
		{"event-level identity", orDash(p.EventPrincipal)},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBSCRIPTION\tDELIVERY\tCOMMITTED\tATTEMPTS\tLAST ERROR")
	for _, d := range rec.Deliveries {
		attempts := "-"
		if d.Attempts > 0 {
			attempts = strconv.Itoa(d.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.SubscriptionID, d.Status, d.Committed, attempts, orDash(d.LastError))
	}
	if len(rec.Deliveries) == 0 {
		fmt.Fprintln(tw, "(no durable subscription matches the event)\t\t\t\t")
	}
	if !rec.DeadLettersComplete {
		fmt.Fprintln(tw, "(the dead-letter topic was not read to its end: a dead letter may be missing)\t\t\t\t")
	}
	return tw.Flush()
}
