package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/internal/cli"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// serverFlags choose the servers of the fan-out, latency and idle benches:
// each is started by the bench (a binary) or pointed at (URL and pid).
type serverFlags struct {
	gatewayBin, gatewayURL, token string
	gatewayPID                    int
	kafka                         string
	centrifugoBin, centrifugoURL  string
	centrifugoPID                 int
	centrifugoKey, centrifugoJWT  string
	noCentrifugo                  bool
	workDir                       string
	gatewayArgs                   stringList
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint([]string(*s)) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// register adds the gateway's flags and, with peer, Centrifugo's.
func (f *serverFlags) register(fs *flag.FlagSet, peer bool) {
	fs.StringVar(&f.gatewayBin, "gateway-bin", "", "start this aep-gateway binary for the run (on a free loopback port, development mode, topics aepctl.bench.<run>.{tenant}.events); else --url")
	fs.StringVar(&f.gatewayURL, "url", "", "a running gateway to load instead of --gateway-bin")
	fs.StringVar(&f.token, "token", "", "bearer token for --url")
	fs.IntVar(&f.gatewayPID, "gateway-pid", 0, "pid of the --url gateway, for its CPU and memory (0: not measured)")
	fs.StringVar(&f.kafka, "kafka-brokers", os.Getenv("KAFKA_BROKERS"), "Kafka brokers of a started gateway and of the direct baselines (empty: the started gateway embeds its broker) [$KAFKA_BROKERS]")
	fs.Var(&f.gatewayArgs, "gateway-arg", "extra flag for a started gateway (repeatable)")
	fs.StringVar(&f.workDir, "work-dir", "", "directory of started servers' logs, configuration and data (default: a temporary one, removed after)")
	if !peer {
		f.noCentrifugo = true
		return
	}
	fs.StringVar(&f.centrifugoBin, "centrifugo-bin", "", "start this Centrifugo v6 binary as the peer (default: centrifugo on PATH or in $GOPATH/bin)")
	fs.StringVar(&f.centrifugoURL, "centrifugo-url", "", "a running Centrifugo instead of starting one (needs --centrifugo-api-key and --centrifugo-token-secret, uni_sse and uni_websocket on)")
	fs.IntVar(&f.centrifugoPID, "centrifugo-pid", 0, "pid of the --centrifugo-url server (0: not measured)")
	fs.StringVar(&f.centrifugoKey, "centrifugo-api-key", "", "HTTP API key of --centrifugo-url")
	fs.StringVar(&f.centrifugoJWT, "centrifugo-token-secret", "", "HS256 connection token secret of --centrifugo-url")
	fs.BoolVar(&f.noCentrifugo, "no-centrifugo", false, "run without the Centrifugo peer")
}

// benchServers are the started or attached servers of one run.
type benchServers struct {
	gateway    *gatewayPeer
	centrifugo *centrifugoPeer // nil without the peer
	kafka      []string
	topic      string // prefix of a started gateway's topics, deleted after the run
	tmp        string // removed by stop when the bench made it
}

// centrifugoBinary finds the Centrifugo binary: the flag, PATH, then
// $GOPATH/bin (where go install puts it).
func (f *serverFlags) centrifugoBinary() (string, error) {
	if f.centrifugoBin != "" {
		return f.centrifugoBin, nil
	}
	if p, err := exec.LookPath("centrifugo"); err == nil {
		return p, nil
	}
	gp := os.Getenv("GOPATH")
	if gp == "" {
		home, _ := os.UserHomeDir()
		gp = filepath.Join(home, "go")
	}
	p := filepath.Join(gp, "bin", "centrifugo")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("no Centrifugo binary: go install github.com/centrifugal/centrifugo/v6@v6.9.1, or pass --centrifugo-bin, --centrifugo-url or --no-centrifugo")
	}
	return p, nil
}

func (f *serverFlags) validate() error {
	switch {
	case f.gatewayBin == "" && f.gatewayURL == "":
		return errors.New("one of --gateway-bin and --url is needed")
	case f.gatewayBin != "" && f.gatewayURL != "":
		return errors.New("--gateway-bin and --url exclude each other")
	case f.centrifugoURL != "" && (f.centrifugoKey == "" || f.centrifugoJWT == ""):
		return errors.New("--centrifugo-url needs --centrifugo-api-key and --centrifugo-token-secret")
	}
	return nil
}

// start starts or attaches the servers; stop undoes it.
func (f *serverFlags) start(ctx context.Context, progress func(string, ...any)) (*benchServers, error) {
	s := &benchServers{}
	if f.kafka != "" {
		s.kafka = cli.SplitList(f.kafka)
	}
	dir := f.workDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "aepctl-bench-"); err != nil {
			return nil, err
		}
		s.tmp = dir
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := s.startGateway(ctx, f, dir, progress); err != nil {
		s.stop()
		return nil, err
	}
	if err := s.startCentrifugo(ctx, f, dir, progress); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *benchServers) startGateway(ctx context.Context, f *serverFlags, dir string, progress func(string, ...any)) error {
	if f.gatewayURL != "" {
		s.gateway = newGatewayPeer(&server{name: "gateway", url: f.gatewayURL, pid: f.gatewayPID}, f.token)
		return nil
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	tmpl := "aepctl.bench." + run + ".{tenant}.events"
	s.topic = "aepctl.bench." + run + "." // the prefix of every topic it makes
	args := []string{"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--topic-template", tmpl,
		"--log-level", "warn", "--access-log-sample", "0", "--max-connections", "0", "--max-connections-per-ip", "0",
		"--max-streams-per-tenant", "0", "--topic-retention", "1h", "--idle-timeout", "10m"}
	if len(s.kafka) > 0 {
		args = append(args, "--kafka-brokers", f.kafka, "--topic-replication-factor", "-1")
	} else {
		args = append(args, "--embedded-kafka-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
	}
	args = append(args, f.gatewayArgs...)
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	srv, err := startServer(ctx, "gateway", f.gatewayBin, args, dir, u, "/healthz")
	if err != nil {
		return err
	}
	progress("started the gateway: pid %d, %s", srv.pid, u)
	s.gateway = newGatewayPeer(srv, "")
	return nil
}

func (s *benchServers) startCentrifugo(ctx context.Context, f *serverFlags, dir string, progress func(string, ...any)) error {
	switch {
	case f.noCentrifugo:
		return nil
	case f.centrifugoURL != "":
		s.centrifugo = attachCentrifugo(f.centrifugoURL, f.centrifugoPID, f.centrifugoKey, f.centrifugoJWT)
		return nil
	}
	bin, err := f.centrifugoBinary()
	if err != nil {
		return err
	}
	c, err := startCentrifugo(ctx, bin, dir)
	if err != nil {
		return err
	}
	progress("started Centrifugo: pid %d, %s", c.srv.pid, c.srv.url)
	s.centrifugo = c
	return nil
}

// peers returns the gateway and, when there is one, Centrifugo.
func (s *benchServers) peers() []namedPeer {
	out := []namedPeer{{"gateway", s.gateway}}
	if s.centrifugo != nil {
		out = append(out, namedPeer{"centrifugo", s.centrifugo})
	}
	return out
}

type namedPeer struct {
	name string
	p    peer
}

// stop stops started servers, deletes a started gateway's topic and the
// temporary directory. Idempotent.
func (s *benchServers) stop() {
	if s.gateway != nil {
		s.gateway.srv.stop()
	}
	if s.centrifugo != nil {
		s.centrifugo.srv.stop()
	}
	if s.topic != "" && len(s.kafka) > 0 {
		deleteTopicsPrefixed(s.kafka, s.topic)
		s.topic = ""
	}
	if s.tmp != "" {
		os.RemoveAll(s.tmp)
		s.tmp = ""
	}
}

// deleteTopics removes the bench's topics from a shared broker, best effort.
func deleteTopics(brokers []string, topics ...string) {
	withAdmin(brokers, func(ctx context.Context, adm *kadm.Client) {
		_, _ = adm.DeleteTopics(ctx, topics...)
	})
}

// deleteTopicsPrefixed removes every topic whose name starts with prefix
// (a started gateway's events, index and presence topics), best effort.
func deleteTopicsPrefixed(brokers []string, prefix string) {
	withAdmin(brokers, func(ctx context.Context, adm *kadm.Client) {
		td, err := adm.ListTopics(ctx)
		if err != nil {
			return
		}
		var names []string
		for _, t := range td.Names() {
			if strings.HasPrefix(t, prefix) {
				names = append(names, t)
			}
		}
		if len(names) > 0 {
			_, _ = adm.DeleteTopics(ctx, names...)
		}
	})
}

func withAdmin(brokers []string, f func(context.Context, *kadm.Client)) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f(ctx, kadm.NewClient(cl))
}
