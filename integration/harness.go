// Package integration holds the end-to-end tests of aep-gateway: they run against a real Kafka-protocol
// broker and exercise the product the way a deployment does. The package has no production code; its only
// non-test files are the broker harness (harness*.go).
//
// # Which broker
//
// StartBroker picks, once per test binary, the first of:
//
//  1. external: KAFKA_BROKERS (comma-separated host:port) is set, e.g. by `make kafka-up` or CI. The broker
//     is shared by every test; tests isolate themselves by topic name (Broker.CreateTopic). It may be a
//     single node (make kafka-up is): give the gateway and new topics replication factor 1.
//  2. testcontainers: a Docker engine answers; one Kafka container (testcontainers-go kafka module) is
//     started for the whole binary and removed by TestMain.
//  3. embedded: an in-process kfake cluster per test, with its data in t.TempDir().
//
// AEP_IT_BROKER=external|testcontainers|embedded forces one kind (and fails the test when it cannot be had);
// AEP_IT_KAFKA_IMAGE overrides the container image; AEP_IT_BROKER_REPORT names a file that gets the one
// "integration: broker=..." line appended (CI prints it, since `go test` hides a passing package's stderr).
//
// # Concurrency
//
// StartBroker and the Broker helpers are safe for parallel tests. The shared container is started at most
// once and stopped by Shutdown, which TestMain (harness_main_test.go) calls after all tests; a package
// must not declare a second TestMain.
package integration

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// Broker kinds, as reported in Broker.Kind.
const (
	KindExternal       = "external"
	KindTestcontainers = "testcontainers"
	KindEmbedded       = "embedded"
)

// Environment variables read by the harness.
const (
	EnvBrokers = "KAFKA_BROKERS"        // seeds of an external cluster
	EnvForce   = "AEP_IT_BROKER"        // force a kind
	EnvImage   = "AEP_IT_KAFKA_IMAGE"   // container image for the testcontainers kind
	EnvReport  = "AEP_IT_BROKER_REPORT" // file to append the broker line to
)

// Broker is a Kafka-protocol cluster a test may use. Seeds is never empty.
type Broker struct {
	Seeds []string
	Kind  string
}

// choice is the per-binary decision: the kind, and for shared kinds the seeds.
type choice struct {
	kind   string
	seeds  []string // external and testcontainers; nil for embedded
	reason string   // why earlier kinds were passed over, for the report line
	err    error    // a forced kind that could not be had
}

var (
	chooseOnce sync.Once
	chosen     choice
	reportOnce sync.Once
)

// StartBroker returns a broker for t, following the order in the package doc. Resources that belong to t
// alone (an embedded cluster) are released by t.Cleanup; a shared broker outlives t.
func StartBroker(t testing.TB) *Broker {
	t.Helper()
	chooseOnce.Do(func() {
		chosen = choose(os.Getenv, func() ([]string, error) { return startShared(os.Getenv) })
	})
	if chosen.err != nil {
		t.Fatalf("integration: %v", chosen.err)
	}
	var b *Broker
	switch chosen.kind {
	case KindEmbedded:
		b = startEmbedded(t)
	default:
		b = &Broker{Seeds: chosen.seeds, Kind: chosen.kind}
	}
	reportOnce.Do(func() { report(b, chosen.reason) })
	return b
}

// choose decides the kind from the environment. getenv is os.Getenv and container starts the shared
// testcontainers broker, outside the harness's own tests.
func choose(getenv func(string) string, container func() ([]string, error)) choice {
	force := strings.ToLower(strings.TrimSpace(getenv(EnvForce)))
	seeds := ParseSeeds(getenv(EnvBrokers))
	switch force {
	case "", KindExternal, KindTestcontainers, KindEmbedded:
	default:
		return choice{err: fmt.Errorf("%s=%q: want external, testcontainers or embedded", EnvForce, force)}
	}
	var skipped []string
	if force == "" || force == KindExternal {
		if len(seeds) > 0 {
			return choice{kind: KindExternal, seeds: seeds}
		}
		if force == KindExternal {
			return choice{err: fmt.Errorf("%s=external but %s is empty", EnvForce, EnvBrokers)}
		}
		skipped = append(skipped, EnvBrokers+" unset")
	}
	if force == "" || force == KindTestcontainers {
		s, err := container()
		if err == nil {
			return choice{kind: KindTestcontainers, seeds: s}
		}
		if force == KindTestcontainers {
			return choice{err: fmt.Errorf("testcontainers: %w", err)}
		}
		skipped = append(skipped, "testcontainers: "+err.Error())
	}
	return choice{kind: KindEmbedded, reason: strings.Join(skipped, "; ")}
}

// ParseSeeds splits a comma-separated broker list, dropping blanks.
func ParseSeeds(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// report writes the one broker line per binary to stderr and, when asked, to the report file.
func report(b *Broker, reason string) {
	line := fmt.Sprintf("integration: broker=%s seeds=%s", b.Kind, strings.Join(b.Seeds, ","))
	if b.Kind == KindEmbedded {
		line += " (kfake, one cluster per test)"
	}
	if reason != "" {
		line += " [" + strings.Join(strings.Fields(reason), " ") + "]"
	}
	fmt.Fprintln(os.Stderr, line)
	if path := os.Getenv(EnvReport); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "integration: %s: %v\n", EnvReport, err)
			return
		}
		defer f.Close()
		fmt.Fprintln(f, line)
	}
}

// Shutdown stops the shared container, if one was started. TestMain calls it once after m.Run.
func Shutdown() { stopShared() }
