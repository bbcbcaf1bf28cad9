package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
)

func TestEnvTwinsAndCommandLinePrecedence(t *testing.T) {
	t.Setenv("AEP_KAFKA_BROKERS", "k1:9092,k2:9092")
	t.Setenv("AEP_TOPIC_PARTITIONS", "24")
	t.Setenv("AEP_WRITE_TIMEOUT", "5s")
	t.Setenv("AEP_KAFKA_TLS", "true")
	c, err := parseConfig([]string{"--topic-partitions", "6"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.brokers(); len(got) != 2 || got[1] != "k2:9092" {
		t.Errorf("brokers from env: %v", got)
	}
	if c.TopicPartitions != 6 {
		t.Errorf("command line must win over env: %d", c.TopicPartitions)
	}
	if c.WriteTimeout != 5*time.Second || !c.KafkaTLS {
		t.Errorf("env durations/bools: %v %v", c.WriteTimeout, c.KafkaTLS)
	}
	if c.embedded() {
		t.Error("brokers configured but embedded chosen")
	}
}

func TestBadEnvIsAnError(t *testing.T) {
	t.Setenv("AEP_TOPIC_PARTITIONS", "many")
	if _, err := parseConfig(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "AEP_TOPIC_PARTITIONS") {
		t.Fatalf("err = %v", err)
	}
}

func TestConfigRejectsContradictions(t *testing.T) {
	cases := map[string][]string{
		"open non-loopback":      {"--listen", "0.0.0.0:8080"},
		"embedded off loopback":  {"--embedded-kafka-listen", "0.0.0.0:9092"},
		"sasl without user":      {"--kafka-brokers", "k:9092", "--kafka-sasl-mechanism", "PLAIN"},
		"unknown sasl":           {"--kafka-brokers", "k:9092", "--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-user", "u"},
		"cert without key":       {"--kafka-tls-cert", "c.pem"},
		"bad key strategy":       {"--key-strategy", "random"},
		"template no tenant":     {"--topic-template", "events"},
		"event over body":        {"--max-event-bytes", "10000", "--max-body-bytes", "5000"},
		"zero partitions":        {"--topic-partitions", "0"},
		"bad log format":         {"--log-format", "xml"},
		"stray argument":         {"extra"},
		"listen without port":    {"--listen", "localhost"},
		"no data dir embedded":   {"--data-dir", ""},
		"zero batch events":      {"--max-batch-events", "0"},
		"tiny event limit":       {"--max-event-bytes", "10"},
		"partitions over bounds": {"--topic-partitions", "20000"},
	}
	for name, args := range cases {
		if _, err := parseConfig(args, io.Discard); err == nil {
			t.Errorf("%s: accepted %v", name, args)
		}
	}
	if _, err := parseConfig([]string{"--listen", "0.0.0.0:8080", "--api-keys", "keys.txt"}, io.Discard); err != nil {
		t.Errorf("keys on a public listener rejected: %v", err)
	}
	if _, err := parseConfig([]string{"--listen", "[::1]:8080"}, io.Discard); err != nil {
		t.Errorf("IPv6 loopback dev mode rejected: %v", err)
	}
}

func TestHelpListsEveryFlagWithItsEnvTwin(t *testing.T) {
	var out bytes.Buffer
	_, err := parseConfig([]string{"--help"}, &out)
	if err != flag.ErrHelp {
		t.Fatalf("err = %v", err)
	}
	help := out.String()
	for _, name := range []string{"listen", "kafka-brokers", "kafka-sasl-mechanism", "data-dir", "embedded-kafka-listen", "api-keys", "topic-template", "max-event-bytes", "log-format"} {
		if !strings.Contains(help, "-"+name) || !strings.Contains(help, "$"+envName(name)) {
			t.Errorf("--help lacks %s or %s", name, envName(name))
		}
	}
}

// SASL options reach a broker that requires them: kfake with SCRAM.
func TestKafkaOptsSASLAgainstKfake(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "gw", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ping := func(pass string) error {
		c := config{KafkaSASLMechanism: "SCRAM-SHA-256", KafkaSASLUser: "gw", KafkaSASLPassword: pass}
		opts, err := kafkaOpts(c, cluster.ListenAddrs(), zerolog.New(io.Discard))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	if err := ping("s3cret"); err != nil {
		t.Fatalf("right password: %v", err)
	}
	if err := ping("wrong"); err == nil {
		t.Fatal("wrong password accepted")
	}
}

func TestCursorKeys(t *testing.T) {
	good := "# rotation: new key first\n2 " + strings.Repeat("ab", 32) + "\n1 " + strings.Repeat("cd", 32) + "\n"
	kr, err := parseCursorKeys(strings.NewReader(good))
	if err != nil || kr.SigningKeyID() != 2 {
		t.Fatalf("keyring %v %v", kr, err)
	}
	for _, bad := range []string{"", "x " + strings.Repeat("ab", 32), "1 zz", "1 abcd", "300 " + strings.Repeat("ab", 32)} {
		if _, err := parseCursorKeys(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	dir := t.TempDir()
	c := config{DataDir: dir}
	a, err := loadCursorKeys(c, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadCursorKeys(c, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Encode("t", cursorSample())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Decode("t", s); err != nil {
		t.Fatalf("the embedded key did not survive a restart: %v", err)
	}
}

func cursorSample() cursor.Cursor {
	return cursor.Cursor{Partitions: 3, Sequence: 7, Offsets: []cursor.PartitionOffset{{Partition: 1, Offset: 42}}}
}

func TestValidatePayloadsFlag(t *testing.T) {
	c, err := parseConfig(nil, io.Discard)
	if err != nil || c.ValidatePayloads {
		t.Fatalf("default: %v %v, want off", c.ValidatePayloads, err)
	}
	t.Setenv("AEP_VALIDATE_PAYLOADS", "true")
	if c, err = parseConfig(nil, io.Discard); err != nil || !c.ValidatePayloads {
		t.Fatalf("AEP_VALIDATE_PAYLOADS=true: %v %v", c.ValidatePayloads, err)
	}
	if c, err = parseConfig([]string{"--validate-payloads=false"}, io.Discard); err != nil || c.ValidatePayloads {
		t.Fatalf("command line must win: %v %v", c.ValidatePayloads, err)
	}
}

// A misspelled AEP_ variable is reported with the name it is closest to;
// the variables of flags are not; one far from every flag is reported
// alone.
func TestUnknownEnvironmentVariablesAreReported(t *testing.T) {
	t.Setenv("AEP_KAFKA_BROKER", "b:9092")
	t.Setenv("AEP_LOG_LEVEL", "debug")
	t.Setenv("AEP_SOMETHING_ELSE_ENTIRELY", "1")
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.UnknownEnv, "\n")
	for _, want := range []string{"AEP_KAFKA_BROKER (did you mean AEP_KAFKA_BROKERS?)", "AEP_SOMETHING_ELSE_ENTIRELY"} {
		if !strings.Contains(got, want) {
			t.Errorf("unknown variables %q, want %q among them", c.UnknownEnv, want)
		}
	}
	if strings.Contains(got, "AEP_LOG_LEVEL") || strings.Contains(got, "ENTIRELY (did") {
		t.Errorf("unknown variables %q", c.UnknownEnv)
	}
	if c.LogLevel != "debug" {
		t.Errorf("AEP_LOG_LEVEL not applied: %q", c.LogLevel)
	}
}

// Every flag is in README's configuration table (a flag missing there is a
// flag an operator reading the README never learns about). Rows may
// abbreviate siblings: `--kafka-tls-ca/-cert/-key`.
func TestEveryFlagIsInTheREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal("README has no Configuration section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`(--[a-z0-9-]+(?:/-[a-z0-9-]+)*)`").FindAllStringSubmatch(table, -1) {
		parts := strings.Split(m[1], "/")
		listed[parts[0]] = true
		stem := parts[0][:strings.LastIndex(parts[0], "-")]
		for _, p := range parts[1:] {
			listed[stem+p] = true
		}
	}
	fs := newFlagSet("x")
	var c config
	defineFlags(fs, &c)
	fs.VisitAll(func(f *flag.Flag) {
		if !listed["--"+f.Name] {
			t.Errorf("--%s is not in README's configuration table", f.Name)
		}
	})
}

func TestTrustedProxiesParse(t *testing.T) {
	c, err := parseConfig([]string{"--trusted-proxies", "10.0.0.0/8, 192.168.1.7,::ffff:172.16.0.1,2001:db8::/32"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.trustedProxies()
	want := "10.0.0.0/8 192.168.1.7/32 172.16.0.1/32 2001:db8::/32"
	if s := fmt.Sprint(got); s != "["+want+"]" {
		t.Fatalf("trusted proxies %v, want [%s]", got, want)
	}
	if _, err := parseConfig([]string{"--trusted-proxies", "ingress-nginx"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--trusted-proxies") {
		t.Fatalf("a host name accepted: %v", err)
	}
}
