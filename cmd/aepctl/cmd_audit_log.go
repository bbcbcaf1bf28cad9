package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/internal/auditlog"
	"github.com/aep-gateway/aep-gateway/internal/auditread"
	"github.com/aep-gateway/aep-gateway/internal/cli"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// exitAudit is audit verify's and check-proof's exit code when the log,
// its checkpoints or the proof do not verify.
const exitAudit = 5

// errAudit marks a failed verification (exit 5); the report was printed.
var errAudit = errors.New("audit verification failed")

// auditSubcommands are the words after `aepctl audit` that are not an
// event id.
var auditSubcommands = map[string]func(context.Context, []string, io.Writer, io.Writer) error{
	"verify": cmdAuditVerify, "export": cmdAuditExport, "prove": cmdAuditProve, "check-proof": cmdAuditCheckProof,
}

// logSource is where the audit commands read a tenant's topics: Kafka or
// an export.
type logSource struct {
	brokers, tenant, template, events, audit, export string
}

func (s *logSource) register(fs *flag.FlagSet, exportFlag bool) {
	fs.StringVar(&s.brokers, "brokers", os.Getenv("AEP_KAFKA_BROKERS"), "Kafka bootstrap brokers, comma-separated (default $AEP_KAFKA_BROKERS); the gateway's embedded broker listens on 127.0.0.1:19092")
	fs.StringVar(&s.tenant, "tenant", "", "the tenant whose log is read")
	fs.StringVar(&s.template, "topic-template", partitioning.DefaultTopicTemplate, "the gateway's --topic-template")
	fs.StringVar(&s.events, "events-topic", "", "read this events topic instead of the tenant's (a copy, for instance)")
	fs.StringVar(&s.audit, "audit-topic", "", "read this audit topic instead of <events topic>.audit")
	if exportFlag {
		fs.StringVar(&s.export, "export", "", "read an `aepctl audit export` file instead of Kafka")
	}
}

func (s *logSource) topics(fs *flag.FlagSet) (auditread.Topics, []kgo.Opt, error) {
	if s.export != "" {
		return auditread.Topics{}, nil, nil
	}
	if s.tenant == "" || s.brokers == "" {
		return auditread.Topics{}, nil, cli.UsageErr(fs, "want --tenant and --brokers (or --export)")
	}
	n := partitioning.Naming{Template: s.template}
	if err := n.Validate(); err != nil {
		return auditread.Topics{}, nil, cli.UsageErr(fs, "%v", err)
	}
	t := auditread.Topics{Events: n.Events(s.tenant), Audit: n.Audit(s.tenant)}
	if s.events != "" {
		t.Events = s.events
	}
	if s.audit != "" {
		t.Audit = s.audit
	}
	return t, []kgo.Opt{kgo.SeedBrokers(strings.Split(s.brokers, ",")...)}, nil
}

// read reads the partitions (and the tenant) from Kafka or the export;
// visit sees every events record.
func (s *logSource) read(ctx context.Context, fs *flag.FlagSet, visit func(int32, int64, auditlog.Record)) (string, []auditlog.PartitionInput, error) {
	t, opts, err := s.topics(fs)
	if err != nil {
		return "", nil, err
	}
	if s.export != "" {
		f, err := os.Open(s.export)
		if err != nil {
			return "", nil, err
		}
		defer f.Close()
		ex, err := auditread.ReadExport(f, visit)
		if err != nil {
			return "", nil, err
		}
		return ex.Tenant, ex.Partitions, nil
	}
	parts, err := auditread.Read(ctx, opts, t, auditread.Visitor{Event: visit})
	return s.tenant, parts, err
}

func readKeys(fs *flag.FlagSet, path string) (auditlog.Keys, error) {
	if path == "" {
		return nil, cli.UsageErr(fs, "want --keys (PEM public keys, or the JSON of the gateway's /.well-known/aep-audit-keys)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return auditlog.ParseKeys(b)
}

func cmdAuditVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "audit verify", "audit verify --keys FILE (--tenant T --brokers B | --export FILE) [--output text|json]", stdout, stderr,
		"Verifies a tenant's log against its signed checkpoints (docs/audit.md): every\n"+
			"checkpoint's signature, the chain of heads, each signed root against the leaves,\n"+
			"and every record against the leaf sealed at its offset. Modified, missing,\n"+
			"inserted, reordered and truncated records are named by partition and offset;\n"+
			"records deleted by retention are counted apart. Exit 0: verified; 5: a finding;\n"+
			"1: the log could not be read; 2: usage.\n")
	var src logSource
	src.register(fs, true)
	keysPath := fs.String("keys", "", "public keys: PEM PUBLIC KEY blocks, or the JSON of /.well-known/aep-audit-keys")
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	keys, err := readKeys(fs, *keysPath)
	if err != nil {
		return err
	}
	tenant, parts, err := src.read(ctx, fs, nil)
	if err != nil {
		return err
	}
	rep := auditlog.Verify(tenant, keys, parts)
	if *out == "json" {
		if err := cli.WriteJSONLine(stdout, rep); err != nil {
			return err
		}
	} else if err := printReport(stdout, rep); err != nil {
		return err
	}
	if !rep.OK {
		return errAudit
	}
	return nil
}

func printReport(w io.Writer, rep auditlog.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tEPOCHS\tCHECKPOINTS\tSEALED\tVERIFIED\tEXPIRED\tUNSEALED\tFINDINGS")
	for _, p := range rep.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Partition, p.Epochs, p.Checkpoints, p.Sealed, p.Verified, p.Expired, p.Unsealed, p.Findings)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	kinds := map[string]int{}
	for _, f := range rep.Findings {
		kinds[f.Kind]++
	}
	for i, f := range rep.Findings {
		if i == 50 {
			fmt.Fprintf(w, "... %d more findings (--output json lists them)\n", len(rep.Findings)-50)
			break
		}
		fmt.Fprintln(w, f.String())
	}
	if rep.OK {
		var verified, expired uint64
		unsealed := 0
		for _, p := range rep.Partitions {
			verified, expired, unsealed = verified+p.Verified, expired+p.Expired, unsealed+p.Unsealed
		}
		_, err := fmt.Fprintf(w, "verified: tenant %s: %d records in the log as sealed, %d expired, %d not sealed yet (the sealer checkpoints every few seconds)\n",
			rep.Tenant, verified, expired, unsealed)
		return err
	}
	names := make([]string, 0, len(kinds))
	for k, n := range kinds {
		names = append(names, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(names)
	_, err := fmt.Fprintf(w, "FAILED: tenant %s: %s\n", rep.Tenant, strings.Join(names, ", "))
	return err
}

func cmdAuditExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "audit export", "audit export --tenant T --brokers B --out FILE", stdout, stderr,
		"Writes a tenant's events and audit topics to FILE (JSON lines) for an auditor who\n"+
			"verifies and proves offline: `aepctl audit verify --export FILE`.\n")
	var src logSource
	src.register(fs, false)
	outPath := fs.String("out", "", "the file to write (- for stdout)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *outPath == "" {
		return cli.UsageErr(fs, "want --out")
	}
	t, opts, err := src.topics(fs)
	if err != nil {
		return err
	}
	w := stdout
	var f *os.File
	if *outPath != "-" {
		if f, err = os.Create(*outPath); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	parts, err := auditread.Export(ctx, opts, src.tenant, t, w)
	if err != nil {
		return err
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return err
		}
	}
	records, cps := 0, 0
	for _, p := range parts {
		records += len(p.Records)
		cps += len(p.Checkpoints)
	}
	fmt.Fprintf(stderr, "exported tenant %s: %d partitions, %d records, %d checkpoints\n", src.tenant, len(parts), records, cps)
	return nil
}

func cmdAuditProve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "audit prove", "audit prove EVENT_ID (--tenant T --brokers B | --export FILE) [--keys FILE]", stdout, stderr,
		"Writes an inclusion proof of one event (JSON on stdout): the record as Kafka holds\n"+
			"it, its position, the signed checkpoint head and the Merkle audit path. Anyone\n"+
			"holding the public key checks it offline: `aepctl audit check-proof`. The event\n"+
			"is found by its aep-id header; the newest record with that id is proved.\n")
	var src logSource
	src.register(fs, true)
	keysPath := fs.String("keys", "", "check the proof with these public keys before writing it")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.UsageErr(fs, "want one EVENT_ID")
	}
	id := fs.Arg(0)
	var found *auditlog.Record
	var part int32
	var off int64
	_, parts, err := src.read(ctx, fs, func(p int32, o int64, r auditlog.Record) {
		for _, h := range r.Headers {
			if string(h.Key) == partitioning.HeaderID && string(h.Value) == id {
				rc := r
				found, part, off = &rc, p, o
			}
		}
	})
	if err != nil {
		return err
	}
	if found == nil {
		return fmt.Errorf("no record with aep-id %q in the log", id)
	}
	var cps []*auditlog.Checkpoint
	for _, in := range parts {
		if in.Partition != part {
			continue
		}
		for _, st := range in.Checkpoints {
			if st.Checkpoint != nil {
				cps = append(cps, st.Checkpoint)
			}
		}
	}
	proof, err := auditlog.NewProof(cps, off, *found)
	if err != nil {
		return fmt.Errorf("event %s (partition %d, offset %d): %w", id, part, off, err)
	}
	if *keysPath != "" {
		keys, err := readKeys(fs, *keysPath)
		if err != nil {
			return err
		}
		if err := proof.Check(keys); err != nil {
			return fmt.Errorf("the proof built does not check: %w", err)
		}
	}
	return cli.WriteJSONLine(stdout, proof)
}

func cmdAuditCheckProof(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "audit check-proof", "audit check-proof --keys FILE PROOF_FILE", stdout, stderr,
		"Checks an inclusion proof (`aepctl audit prove`) offline: the checkpoint's\n"+
			"signature with the public keys, and the record's inclusion in its signed head.\n"+
			"Exit 0: it checks; 5: it does not; 1: unreadable; 2: usage.\n")
	keysPath := fs.String("keys", "", "public keys: PEM PUBLIC KEY blocks, or the JSON of /.well-known/aep-audit-keys")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.UsageErr(fs, "want one PROOF_FILE")
	}
	keys, err := readKeys(fs, *keysPath)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	var p auditlog.Proof
	if err := json.Unmarshal(b, &p); err != nil {
		fmt.Fprintf(stdout, "FAILED: not a proof: %v\n", err)
		return errAudit
	}
	if err := p.Check(keys); err != nil {
		fmt.Fprintf(stdout, "FAILED: %v\n", err)
		return errAudit
	}
	fmt.Fprintf(stdout, "verified: offset %d of partition %d (tenant %s) is record %d of the head of size %d signed by key %s\n",
		p.Offset, p.Head.Partition, p.Head.Tenant, p.Index, p.Head.Size, p.KeyID)
	return nil
}
