package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/internal/aepclient"
	"github.com/aep-gateway/aep-gateway/internal/cli"
)

const subsUsage = `Usage: aepctl subscriptions COMMAND [flags]

Durable dialect D subscriptions (at_least_once, docs/delivery-durable-d.md):

  aepctl subscriptions create [filters] [--ack-timeout D] [--max-attempts N]
                              [--max-ack-pending N] [--expires-in D]
                              [--from-cursor C]
  aepctl subscriptions list
  aepctl subscriptions get ID      filter, committed offsets and lag; with a
                                   stream open on that node, pending acks,
                                   redeliveries, dead letters, acked
  aepctl subscriptions delete ID

Every command takes --url, --token, --profile and --output text|json
(json: the gateway's answer as it is). Read the events with
"aepctl consume --subscription ID --ack".
`

func cmdSubscriptions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, subsUsage)
		return cli.ErrUsage
	}
	switch args[0] {
	case "create":
		return cmdSubCreate(ctx, args[1:], stdout, stderr)
	case "list", "ls":
		return cmdSubOne(ctx, "list", args[1:], stdout, stderr)
	case "get", "show":
		return cmdSubOne(ctx, "get", args[1:], stdout, stderr)
	case "delete", "rm":
		return cmdSubOne(ctx, "delete", args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, subsUsage)
		return nil
	}
	fmt.Fprintf(stderr, "aepctl subscriptions: unknown command %q\n\n%s", args[0], subsUsage)
	return cli.ErrUsage
}

// dFilterFlags are the seed 000 filter members as flags.
type dFilterFlags struct {
	types, source, target, topic, session, conversation, task *string
}

func (f *dFilterFlags) register(fs *flag.FlagSet) {
	f.types = fs.String("types", "", "type patterns, e.g. task.*,tool.call.* (comma-separated)")
	f.source = fs.String("source", "", "sources (comma-separated)")
	f.target = fs.String("target", "", "targets (comma-separated)")
	f.topic = fs.String("topic", "", "topics (comma-separated)")
	f.session = fs.String("session", "", "session ids (comma-separated)")
	f.conversation = fs.String("conversation", "", "conversation ids (comma-separated)")
	f.task = fs.String("task", "", "task ids (comma-separated)")
}

// members returns the D filter members that were given, by member name.
func (f *dFilterFlags) members() map[string][]string {
	m := map[string][]string{}
	for k, v := range map[string]*string{"types": f.types, "source": f.source, "target": f.target, "topic": f.topic,
		"session_id": f.session, "conversation_id": f.conversation, "task_id": f.task} {
		if *v != "" {
			m[k] = cli.SplitList(*v)
		}
	}
	return m
}

// hasAnchor reports whether one of types, source, target or topic is set,
// which seed 000 requires of a JSON filter.
func (f *dFilterFlags) hasAnchor() bool {
	return *f.types != "" || *f.source != "" || *f.target != "" || *f.topic != ""
}

func cmdSubCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "subscriptions create", "subscriptions create [--types T] [--source S] [--target T] [--topic T] [--session S] [--conversation C] [--task T] [--ack-timeout D] [--max-attempts N] [--max-ack-pending N] [--expires-in D] [--from-cursor C]", stdout, stderr,
		"Creates a durable at_least_once subscription (POST /aep/subscriptions). The filter\nneeds one of --types, --source, --target or --topic. It starts at the current end\nof the log (or at --from-cursor) and prints the new subscription's id.\n")
	var conn cli.ConnFlags
	conn.Register(fs)
	var f dFilterFlags
	f.register(fs)
	ackTimeout := fs.Duration("ack-timeout", 0, "redeliver an event not acknowledged within this (100ms..1h; default: the gateway's, 30s)")
	maxAttempts := fs.Int("max-attempts", 0, "dead-letter after this many deliveries handed to a client without an ack (1..100; default: the gateway's, 3)")
	maxPending := fs.Int("max-ack-pending", 0, "most events handed out and not acknowledged; the stream waits for acks past it (1..10000; default: the gateway's, 1000)")
	expiresIn := fs.Duration("expires-in", 0, "the subscription expires after this long (default: never)")
	cursor := fs.String("from-cursor", "", "start at this cursor instead of the end of the log")
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *ackTimeout < 0, *maxAttempts < 0, *maxPending < 0, *expiresIn < 0:
		return cli.UsageErr(fs, "--ack-timeout, --max-attempts, --max-ack-pending and --expires-in must not be negative")
	case *ackTimeout > 0 && *ackTimeout < time.Millisecond:
		return cli.UsageErr(fs, "--ack-timeout is below a millisecond")
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	if !f.hasAnchor() {
		return cli.UsageErr(fs, "the filter needs one of --types, --source, --target or --topic")
	}
	m := f.members()
	req := aepclient.SubscriptionRequest{Types: m["types"], Source: m["source"], Target: m["target"], Topic: m["topic"],
		SessionID: m["session_id"], ConversationID: m["conversation_id"], TaskID: m["task_id"],
		FromCursor: *cursor, AckTimeoutMS: ackTimeout.Milliseconds(), MaxAttempts: *maxAttempts, MaxAckPending: *maxPending}
	if *expiresIn > 0 {
		req.ExpiresAt = time.Now().Add(*expiresIn).UTC().Format(time.RFC3339)
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	c := &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}
	sub, raw, err := c.CreateSubscription(ctx, req)
	if err != nil {
		return err
	}
	if *out == "json" {
		return cli.WriteJSONLine(stdout, raw)
	}
	fmt.Fprintln(stdout, sub.ID)
	return nil
}

// cmdSubOne is list, get and delete.
func cmdSubOne(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	synopsis := "subscriptions " + verb + " ID"
	if verb == "list" {
		synopsis = "subscriptions list"
	}
	fs := cli.NewFlagSet("aepctl", "subscriptions "+verb, synopsis, stdout, stderr)
	var conn cli.ConnFlags
	conn.Register(fs)
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	want := 1
	if verb == "list" {
		want = 0
	}
	if fs.NArg() != want {
		return cli.UsageErr(fs, "want %d argument(s), got %d", want, fs.NArg())
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	c := &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}
	switch verb {
	case "delete":
		if err := c.DeleteSubscription(ctx, fs.Arg(0)); err != nil {
			return err
		}
		if *out == "json" {
			return cli.WriteJSONLine(stdout, map[string]any{"subscription_id": fs.Arg(0), "deleted": true})
		}
		fmt.Fprintf(stdout, "deleted %s\n", fs.Arg(0))
		return nil
	case "list":
		subs, raw, err := c.ListSubscriptions(ctx)
		if err != nil {
			return err
		}
		if *out == "json" {
			return cli.WriteJSONLine(stdout, raw)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tCREATED\tEXPIRES\tACK TIMEOUT\tMAX ATTEMPTS\tFILTER")
		for _, s := range subs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%s\n", s.ID, s.CreatedAt.UTC().Format(time.RFC3339), expiresText(s.ExpiresAt),
				time.Duration(s.AckTimeoutMS)*time.Millisecond, s.MaxAttempts, shorten(s.Filter, 0))
		}
		return tw.Flush()
	}
	sub, raw, err := c.GetSubscription(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if *out == "json" {
		return cli.WriteJSONLine(stdout, raw)
	}
	printSubscription(stdout, sub)
	return nil
}

func expiresText(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

func printSubscription(w io.Writer, s aepclient.Subscription) {
	lag := "?"
	if s.Lag != nil {
		lag = fmt.Sprint(*s.Lag)
	}
	fmt.Fprintf(w, "subscription  %s\nfilter        %s\nmode          %s\ncreated       %s\nexpires       %s\nack timeout   %v\nmax attempts  %d\nmax pending   %d\nlag           %s\n",
		s.ID, shorten(s.Filter, 0), s.DeliveryMode, s.CreatedAt.UTC().Format(time.RFC3339), expiresText(s.ExpiresAt),
		time.Duration(s.AckTimeoutMS)*time.Millisecond, s.MaxAttempts, s.MaxAckPending, lag)
	if s.Streaming {
		fmt.Fprintf(w, "streaming     yes (on this node): pending acks %d, handed %d, redeliveries %d, dead-lettered %d, acked %d\n",
			s.PendingAcks, s.Handed, s.Redeliveries, s.DeadLettered, s.Acked)
	} else {
		fmt.Fprintln(w, "streaming     no (not on the node that answered)")
	}
	if len(s.Committed) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "partition\tcommitted\tend\tlag\t")
		for _, p := range s.Committed {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\n", p.Partition, p.Committed, p.End, p.Lag)
		}
		tw.Flush()
	}
}

func cmdAck(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	reject := verb == "reject"
	help := "Acknowledges events of a durable subscription (event.acknowledged envelopes to\nPOST /aep/subscriptions/ID/acks), on any gateway node: they are in Kafka when\nanswered; \"recorded\" means the stream's holder (on another node, or the next\nstream) applies them.\n"
	if reject {
		help = "Rejects events of a durable subscription (event.rejected envelopes): a rejected\nevent is dead-lettered at once with --code and --message; with --retryable it is\nredelivered after the subscription's backoff instead, and dead-lettered with that\nerror once its attempts run out. Any gateway node takes them\n(docs/durable-cluster.md).\n"
	}
	fs := cli.NewFlagSet("aepctl", verb, verb+" --subscription ID [--code C --message M --retryable] EVENT_ID...", stdout, stderr, help)
	var conn cli.ConnFlags
	conn.Register(fs)
	id := fs.String("subscription", "", "subscription id (required)")
	var code, msg *string
	var retryable *bool
	if reject {
		code = fs.String("code", "task_error", "error code of the rejection")
		msg = fs.String("message", "rejected by aepctl", "error message of the rejection")
		retryable = fs.Bool("retryable", false, "mark the rejection retryable: redeliver the event (it counts an attempt) instead of dead-lettering it")
	}
	out := cli.OutputFlag(fs, "text", "text", "json")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *id == "":
		return cli.UsageErr(fs, "--subscription is required")
	case fs.NArg() == 0:
		return cli.UsageErr(fs, "name at least one EVENT_ID")
	}
	acks := make([]aepclient.Ack, fs.NArg())
	for i, e := range fs.Args() {
		acks[i] = aepclient.Ack{EventID: e}
		if reject {
			acks[i] = aepclient.Ack{EventID: e, Reject: true, Code: *code, Message: *msg, Retryable: *retryable}
		}
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	c := &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}
	rs, err := c.SendAcks(ctx, *id, acks)
	if err != nil {
		return err
	}
	counts := aepclient.AckCounts{}
	counts.Add(rs)
	if *out == "json" {
		if err := cli.WriteJSONLine(stdout, map[string]any{"results": rs}); err != nil {
			return err
		}
	} else {
		for _, r := range rs {
			fmt.Fprintf(stdout, "%s\t%s\n", r.EventID, r.Result)
		}
	}
	if counts["closed"] > 0 || counts["invalid"] > 0 {
		return errRejected
	}
	return nil
}

const consumeSynopsis = "consume --subscription ID [--ack] [--reject-types T] [--ack-batch N] [--ack-interval D] [--output pretty|ndjson|json] [--count N] [--timeout D]"

const consumeHelp = `Streams a durable subscription (GET /aep/subscriptions/ID/stream) and prints its
events like "aepctl tail". With --ack every printed event is acknowledged, in
batches of --ack-batch or every --ack-interval, and what is pending is sent
before aepctl exits (also on Ctrl-C); events whose type matches --reject-types
are rejected instead (dead-lettered at once). Without --ack the events are
redelivered after the subscription's ack timeout. Redeliveries
(event.redelivered) and dead letters (event.dead_lettered) are printed too.

With --count N the stream asks the gateway to hand out at most N events not
yet acknowledged (the stream request's max_ack_pending), so a consume that
reads N events and leaves is not charged attempts for events it never read.

The acks go to the same --url as the stream: the gateway node serving a
stream is the one that takes its acks.
`

func cmdConsume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("aepctl", "consume", consumeSynopsis, stdout, stderr, consumeHelp)
	var conn cli.ConnFlags
	conn.Register(fs)
	id := fs.String("subscription", "", "subscription id (required)")
	ack := fs.Bool("ack", false, "acknowledge each event after printing it")
	rejectTypes := fs.String("reject-types", "", "with --ack: reject events of these type patterns instead (comma-separated, e.g. task.failed,debug.*)")
	rejectCode := fs.String("reject-code", "task_error", "error code of --reject-types rejections")
	batch := fs.Int("ack-batch", 100, "most acks per request (1..10000)")
	interval := fs.Duration("ack-interval", time.Second, "send pending acks at least this often")
	out := cli.OutputFlag(fs, "pretty", "pretty", "ndjson", "json")
	count := fs.Int("count", 0, "stop after N events (0: no limit)")
	timeout := fs.Duration("timeout", 0, "stop after this long (0: no limit)")
	width := fs.Int("width", 100, "most payload characters on a pretty line (0: all)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *id == "":
		return cli.UsageErr(fs, "--subscription is required")
	case *batch < 1 || *batch > aepclient.MaxAcksPerRequest:
		return cli.UsageErr(fs, "--ack-batch must be within 1..%d", aepclient.MaxAcksPerRequest)
	case *interval <= 0, *count < 0, *timeout < 0, *width < 0:
		return cli.UsageErr(fs, "--ack-interval must be positive; --count, --timeout and --width not negative")
	case *rejectTypes != "" && !*ack:
		return cli.UsageErr(fs, "--reject-types needs --ack")
	case fs.NArg() > 0:
		return cli.UsageErr(fs, "unexpected argument %q", fs.Arg(0))
	}
	opt := ConsumeOptions{TailOptions: TailOptions{Output: *out, Count: *count, Timeout: *timeout, Width: *width},
		Ack: *ack, RejectCode: *rejectCode, AckBatch: *batch, AckInterval: *interval}
	if *rejectTypes != "" {
		b, _ := json.Marshal(map[string][]string{"types": cli.SplitList(*rejectTypes)})
		f, err := filtering.ParseD(b)
		if err != nil {
			return cli.UsageErr(fs, "--reject-types: %v", err)
		}
		opt.RejectTypes = f
	}
	if err := conn.Resolve(); err != nil {
		return err
	}
	c := &aepclient.Client{BaseURL: conn.URL, Token: conn.Token}
	_, err := Consume(ctx, c, *id, opt, stdout, stderr)
	return err
}
