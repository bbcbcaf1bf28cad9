package integration

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSeeds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"127.0.0.1:9092", []string{"127.0.0.1:9092"}},
		{" a:1 ,b:2,, c:3 ", []string{"a:1", "b:2", "c:3"}},
	} {
		if got := ParseSeeds(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("ParseSeeds(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestChoose(t *testing.T) {
	up := func() ([]string, error) { return []string{"127.0.0.1:32768"}, nil }
	down := func() ([]string, error) { return nil, errNoDocker }
	for _, tc := range []struct {
		name      string
		env       map[string]string
		container func() ([]string, error)
		wantKind  string
		wantSeeds []string
		wantErr   bool
	}{
		{"external wins", map[string]string{EnvBrokers: "k1:9092,k2:9092"}, up, KindExternal, []string{"k1:9092", "k2:9092"}, false},
		{"blank brokers fall through", map[string]string{EnvBrokers: " , "}, up, KindTestcontainers, []string{"127.0.0.1:32768"}, false},
		{"container when no brokers", nil, up, KindTestcontainers, []string{"127.0.0.1:32768"}, false},
		{"embedded when no docker", nil, down, KindEmbedded, nil, false},
		{"forced embedded ignores brokers", map[string]string{EnvBrokers: "k:1", EnvForce: "Embedded"}, up, KindEmbedded, nil, false},
		{"forced container ignores brokers", map[string]string{EnvBrokers: "k:1", EnvForce: "testcontainers"}, up, KindTestcontainers, []string{"127.0.0.1:32768"}, false},
		{"forced container without docker fails", map[string]string{EnvForce: "testcontainers"}, down, "", nil, true},
		{"forced external without brokers fails", map[string]string{EnvForce: "external"}, up, "", nil, true},
		{"unknown kind fails", map[string]string{EnvForce: "docker"}, up, "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			c := choose(func(k string) string { return tc.env[k] }, func() ([]string, error) {
				called = true
				return tc.container()
			})
			if (c.err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", c.err, tc.wantErr)
			}
			if c.kind != tc.wantKind || !slices.Equal(c.seeds, tc.wantSeeds) {
				t.Fatalf("got kind %q seeds %q, want %q %q", c.kind, c.seeds, tc.wantKind, tc.wantSeeds)
			}
			if tc.wantKind == KindExternal && called {
				t.Fatal("a container was started although external brokers were given")
			}
			if tc.wantKind == KindEmbedded && !tc.wantErr && tc.env[EnvForce] == "" && c.reason == "" {
				t.Fatal("fell back to embedded without saying why")
			}
		})
	}
}

func TestDockerAddressable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		files []string
		want  bool
	}{
		{"nothing", map[string]string{"HOME": "/home/u"}, nil, false},
		{"DOCKER_HOST", map[string]string{"DOCKER_HOST": "tcp://127.0.0.1:2375"}, nil, true},
		{"system socket", nil, []string{"/var/run/docker.sock"}, true},
		{"desktop socket", map[string]string{"HOME": "/home/u"}, []string{"/home/u/.docker/run/docker.sock"}, true},
		{"rootless socket", map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}, []string{"/run/user/1000/docker.sock"}, true},
		{"properties file", map[string]string{"HOME": "/home/u"}, []string{"/home/u/.testcontainers.properties"}, true},
		{"unrelated file", map[string]string{"HOME": "/home/u"}, []string{"/home/u/docker.sock"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dockerAddressable(func(k string) string { return tc.env[k] },
				func(p string) bool { return slices.Contains(tc.files, p) })
			if got != tc.want {
				t.Fatalf("dockerAddressable = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTopicNameIsLegalAndUnique(t *testing.T) {
	legal := regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	seen := map[string]bool{}
	for range 50 {
		n := TopicName(t)
		if !legal.MatchString(n) {
			t.Fatalf("TopicName = %q: not a legal Kafka topic name", n)
		}
		if seen[n] {
			t.Fatalf("TopicName repeated %q", n)
		}
		seen[n] = true
	}
	t.Run("sub test/with spaces and ünïcode", func(t *testing.T) {
		if n := TopicName(t); !legal.MatchString(n) {
			t.Fatalf("TopicName = %q: not a legal Kafka topic name", n)
		}
	})
}

// TestStartBrokerAnswers checks that whatever broker was chosen serves the Kafka protocol, and that the
// choice follows the environment.
func TestStartBrokerAnswers(t *testing.T) {
	b := StartBroker(t)
	if len(b.Seeds) == 0 {
		t.Fatal("broker without seeds")
	}
	switch b.Kind {
	case KindExternal, KindTestcontainers, KindEmbedded:
	default:
		t.Fatalf("unknown kind %q", b.Kind)
	}
	if forced := chosenForce(); forced != "" && forced != b.Kind {
		t.Fatalf("%s=%s but got %s", EnvForce, forced, b.Kind)
	}
	if chosenForce() == "" && len(ParseSeeds(getenvBrokers())) > 0 && b.Kind != KindExternal {
		t.Fatalf("%s is set but kind is %s", EnvBrokers, b.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, err := b.Admin(t).ListBrokers(ctx)
	if err != nil {
		t.Fatalf("list brokers: %v", err)
	}
	if len(bs) == 0 {
		t.Fatal("cluster lists no brokers")
	}
}

func TestCreateTopicIsReady(t *testing.T) {
	b := StartBroker(t)
	topic := b.CreateTopic(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tds, err := b.Admin(t).ListTopics(ctx, topic)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		t.Fatalf("topic %s missing after CreateTopic: %v", topic, td.Err)
	}
	if len(td.Partitions) != 2 {
		t.Fatalf("topic %s has %d partitions, want 2", topic, len(td.Partitions))
	}
	// A second create of the same name must be refused: proof the helper really created it.
	resp, err := b.Admin(t).CreateTopic(ctx, 2, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err == nil {
		t.Fatal("creating an existing topic succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("create again: %v", err)
	}
}

func chosenForce() string   { return strings.ToLower(strings.TrimSpace(os.Getenv(EnvForce))) }
func getenvBrokers() string { return os.Getenv(EnvBrokers) }
