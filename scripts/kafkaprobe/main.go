// Command kafkaprobe waits until a Kafka cluster answers over the Kafka protocol: it asks for the broker
// list (Metadata) until at least one broker is listed or the timeout passes. scripts/kafka.sh uses it to
// tell "the port is open" from "the broker serves requests".
//
//	go run ./scripts/kafkaprobe -brokers 127.0.0.1:9092 -timeout 60s
//
// Exit status 0 when ready, 1 on timeout, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()

	seeds := splitSeeds(*brokers)
	if len(seeds) == 0 {
		fmt.Fprintln(os.Stderr, "kafkaprobe: -brokers is empty")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	brokersSeen, err := probe(ctx, seeds)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkaprobe: %s not ready: %v\n", strings.Join(seeds, ","), err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "kafkaprobe: ready, brokers %s\n", brokersSeen)
}

func splitSeeds(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// probe polls the cluster's broker list every half second until it is non-empty or ctx ends.
func probe(ctx context.Context, seeds []string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		attempt, cancel := context.WithTimeout(ctx, 3*time.Second)
		bs, err := adm.ListBrokers(attempt)
		cancel()
		if err == nil && len(bs) > 0 {
			names := make([]string, 0, len(bs))
			for _, b := range bs {
				names = append(names, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
			}
			return strings.Join(names, ","), nil
		}
		if err != nil {
			lastErr = err
		} else {
			lastErr = errors.New("metadata lists no brokers")
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}
