package auditread

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/internal/auditlog"
)

// ExportFormat is the first line's format of an export.
const ExportFormat = "aep-audit-export/v1"

// exportHeader is an export's first line.
type exportHeader struct {
	Format     string            `json:"format"`
	Tenant     string            `json:"tenant"`
	Events     string            `json:"events_topic"`
	Audit      string            `json:"audit_topic"`
	Partitions []exportPartition `json:"partitions"`
}

type exportPartition struct {
	Partition  int32 `json:"partition"`
	LogStart   int64 `json:"log_start"`
	LogEnd     int64 `json:"log_end"`
	AuditStart int64 `json:"audit_start"`
}

// exportLine is every later line: an events record (kind "event") or a
// checkpoint record of the audit topic (kind "checkpoint", its value as
// it is in the topic).
type exportLine struct {
	Kind       string                `json:"kind"`
	Partition  int32                 `json:"partition"`
	Offset     int64                 `json:"offset"`
	Record     *auditlog.ProofRecord `json:"record,omitempty"`
	Checkpoint json.RawMessage       `json:"checkpoint,omitempty"`
}

// Export writes the tenant's events and audit topics to w as JSON lines:
// a header with each partition's bounds, then every record. It returns
// what it read, for the caller's summary.
func Export(ctx context.Context, opts []kgo.Opt, tenant string, t Topics, w io.Writer) ([]auditlog.PartitionInput, error) {
	// Records are written as they are read; the partitions' bounds, known
	// only once the read ends, follow them in a last line (ReadExport
	// refuses a file without it: a truncated export).
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	var werr error
	put := func(v any) {
		if werr == nil {
			werr = enc.Encode(v)
		}
	}
	put(exportHeader{Format: ExportFormat, Tenant: tenant, Events: t.Events, Audit: t.Audit})
	parts, err := Read(ctx, opts, t, Visitor{
		Event: func(p int32, o int64, rec auditlog.Record) {
			pr := auditlog.ProofRecordOf(rec)
			put(exportLine{Kind: "event", Partition: p, Offset: o, Record: &pr})
		},
		Audit: func(p int32, o int64, v []byte) {
			if !json.Valid(v) {
				v, _ = json.Marshal(string(v)) // kept, and reported as undecodable
			}
			put(exportLine{Kind: "checkpoint", Partition: p, Offset: o, Checkpoint: v})
		},
	})
	if err != nil {
		return nil, err
	}
	bounds := exportHeader{Format: ExportFormat + "+bounds"}
	for _, in := range parts {
		bounds.Partitions = append(bounds.Partitions, exportPartition{in.Partition, in.LogStart, in.LogEnd, in.AuditStart})
	}
	put(bounds)
	if werr == nil {
		werr = bw.Flush()
	}
	if werr != nil {
		return nil, fmt.Errorf("auditread: export: %w", werr)
	}
	return parts, nil
}

// Exported is an export read back.
type Exported struct {
	Tenant     string
	Topics     Topics
	Partitions []auditlog.PartitionInput
}

// ReadExport reads an export; visit sees each events record.
func ReadExport(r io.Reader, visit func(partition int32, offset int64, rec auditlog.Record)) (*Exported, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<20))
	var h exportHeader
	if err := dec.Decode(&h); err != nil || h.Format != ExportFormat {
		return nil, fmt.Errorf("auditread: not an %s file", ExportFormat)
	}
	parts := map[int32]*auditlog.PartitionInput{}
	part := func(p int32) *auditlog.PartitionInput {
		if parts[p] == nil {
			parts[p] = &auditlog.PartitionInput{Partition: p}
		}
		return parts[p]
	}
	sawBounds := false
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("auditread: export: %w", err)
		}
		var b exportHeader
		if json.Unmarshal(raw, &b) == nil && b.Format == ExportFormat+"+bounds" {
			for _, ep := range b.Partitions {
				in := part(ep.Partition)
				in.LogStart, in.LogEnd, in.AuditStart = ep.LogStart, ep.LogEnd, ep.AuditStart
			}
			sawBounds = true
			continue
		}
		var l exportLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("auditread: export: %w", err)
		}
		in := part(l.Partition)
		switch l.Kind {
		case "event":
			if l.Record == nil {
				return nil, fmt.Errorf("auditread: export: event at %d/%d without its record", l.Partition, l.Offset)
			}
			rec := l.Record.Record()
			in.Records = append(in.Records, auditlog.Logged{Offset: l.Offset, Content: auditlog.ContentHash(rec)})
			if visit != nil {
				visit(l.Partition, l.Offset, rec)
			}
		case "checkpoint":
			cp, err := auditlog.ParseCheckpoint(l.Checkpoint)
			in.Checkpoints = append(in.Checkpoints, auditlog.Stored{AuditOffset: l.Offset, Checkpoint: cp, Err: err})
		default:
			return nil, fmt.Errorf("auditread: export: line of kind %q", l.Kind)
		}
	}
	if !sawBounds {
		return nil, errors.New("auditread: export: truncated (no bounds line at its end)")
	}
	out := &Exported{Tenant: h.Tenant, Topics: Topics{Events: h.Events, Audit: h.Audit}}
	for _, in := range parts {
		sort.Slice(in.Records, func(i, j int) bool { return in.Records[i].Offset < in.Records[j].Offset })
		out.Partitions = append(out.Partitions, *in)
	}
	sort.Slice(out.Partitions, func(i, j int) bool { return out.Partitions[i].Partition < out.Partitions[j].Partition })
	return out, nil
}
