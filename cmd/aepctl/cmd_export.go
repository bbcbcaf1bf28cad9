package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/internal/cli"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// exportTopics are the topics `aepctl export --from` reads.
var exportTopics = map[string]func(partitioning.Naming, string) string{
	"cloudevents": partitioning.Naming.CloudEvents,
	"ocsf":        partitioning.Naming.OCSF,
	"events":      partitioning.Naming.Events,
}

// cmdExport writes a tenant's CloudEvents, OCSF or events topic, as it
// stands now, as JSON Lines: the way into analytics engines that read
// files (DuckDB, Spark, pandas; docs/analytics.md "Quickstart").
func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "export", "export --tenant T --brokers B [--from cloudevents|ocsf|events] [--out FILE]", stdout, stderr,
		"Writes every record of a tenant's bridge topic (or its events topic) that is in\n"+
			"Kafka now, read_committed, one record value per line (JSON Lines), partitions\n"+
			"interleaved, each in offset order; then exits. The CloudEvents and OCSF\n"+
			"topics are written by the gateway's bridges (--cloudevents-bridge, --ocsf-bridge).\n"+
			"A bridge's transaction still open at the end is waited for (up to --timeout).\n"+
			"DuckDB reads the file as a table: SELECT * FROM read_json_auto('FILE').\n")
	brokers := fs.String("brokers", os.Getenv("AEP_KAFKA_BROKERS"), "Kafka bootstrap brokers, comma-separated (default $AEP_KAFKA_BROKERS); the gateway's embedded broker listens on --embedded-kafka-listen")
	tenant := fs.String("tenant", "", "the tenant whose topic is read")
	template := fs.String("topic-template", partitioning.DefaultTopicTemplate, "the gateway's --topic-template")
	from := fs.String("from", "cloudevents", "which topic: cloudevents (<events topic>.cloudevents), ocsf (<events topic>.ocsf) or events (the log itself, both dialects)")
	topic := fs.String("topic", "", "read this topic instead (overrides --tenant and --from)")
	outPath := fs.String("out", "-", "the file to write (- for stdout)")
	timeout := fs.Duration("timeout", time.Minute, "give up when the topic has not been read to its end within this time")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if *brokers == "" {
		return cli.UsageErr(fs, "want --brokers")
	}
	name := *topic
	if name == "" {
		topicOf, ok := exportTopics[*from]
		if !ok {
			return cli.UsageErr(fs, "--from %q: want cloudevents, ocsf or events", *from)
		}
		if *tenant == "" {
			return cli.UsageErr(fs, "want --tenant (or --topic)")
		}
		n := partitioning.Naming{Template: *template}
		if err := n.Validate(); err != nil {
			return cli.UsageErr(fs, "%v", err)
		}
		name = topicOf(n, *tenant)
	}
	w := stdout
	var f *os.File
	if *outPath != "-" {
		var err error
		if f, err = os.Create(*outPath); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	bw := bufio.NewWriterSize(w, 256<<10)
	n, err := exportTopic(ctx, strings.Split(*brokers, ","), name, bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && f != nil {
		err = f.Close()
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", name, err)
	}
	fmt.Fprintf(stderr, "exported %d records of %s\n", n, name)
	return nil
}

var newline = []byte{'\n'}

// exportTopic writes each record value of topic up to the end offsets
// read at the start, one per line. Transaction markers are kept by the
// client (not written) so a partition whose last offset is a marker ends.
func exportTopic(ctx context.Context, seeds []string, topic string, w io.Writer) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("end offsets: %w", err)
	}
	at, end := map[int32]kgo.Offset{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > s.Offset {
			at[o.Partition], end[o.Partition] = kgo.NewOffset().At(s.Offset), o.Offset
		}
	})
	if len(at) == 0 {
		return 0, nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	written := 0
	for len(end) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return written, fmt.Errorf("%d partitions not read to their end: %w", len(end), err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = fmt.Errorf("partition %d: %w", p, err) })
		if ferr != nil {
			return written, ferr
		}
		var werr error
		fs.EachRecord(func(r *kgo.Record) {
			e, ok := end[r.Partition]
			if !ok || r.Offset >= e || werr != nil {
				return
			}
			if !r.Attrs.IsControl() {
				if _, werr = w.Write(r.Value); werr == nil { // r.Value is a window of the fetch: never appended to
					_, werr = w.Write(newline)
				}
				if werr == nil {
					written++
				}
			}
			if r.Offset >= e-1 {
				delete(end, r.Partition)
			}
		})
		if werr != nil {
			return written, werr
		}
	}
	return written, nil
}
