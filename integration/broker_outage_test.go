package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// ownKafka is an Apache Kafka broker of this test alone (scripts/kafka.sh
// in a temporary directory on free ports), so that it can be SIGKILLed.
type ownKafka struct {
	t    testing.TB
	dir  string
	addr string
	env  []string
}

// startOwnKafka starts a broker of the test's own. Without Java the test
// is skipped, except in CI (CI=true), where it must run.
func startOwnKafka(t testing.TB) *ownKafka {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("java not found and CI=true: this test must run in CI (scripts/kafka.sh needs Java 17): %v", err)
		}
		t.Skipf("java not found: this test starts its own Apache Kafka with scripts/kafka.sh, which needs Java 17 (%v)", err)
	}
	port := freePortPair(t)
	k := &ownKafka{t: t, dir: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", port)}
	k.env = append(os.Environ(), "KAFKA_DIR="+k.dir, "KAFKA_PORT="+strconv.Itoa(port),
		"KAFKA_CONTROLLER_PORT="+strconv.Itoa(port+1), "KAFKA_HEAP_OPTS=-Xms128m -Xmx512m", "KAFKA_START_TIMEOUT=240")
	t.Cleanup(func() { _ = k.script("down") })
	if err := k.script("up"); err != nil {
		t.Fatalf("starting the test's own broker: %v", err)
	}
	return k
}

func (k *ownKafka) script(cmd string) error {
	c := exec.Command("bash", "../scripts/kafka.sh", cmd)
	c.Env = k.env
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kafka.sh %s: %w\n%s", cmd, err, out)
	}
	return nil
}

// kill SIGKILLs the broker's JVM and returns when it is dead (a zombie
// counts: it serves nothing) with the time the signal was sent.
func (k *ownKafka) kill() time.Time {
	k.t.Helper()
	b, err := os.ReadFile(filepath.Join(k.dir, "kafka.pid"))
	if err != nil {
		k.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		k.t.Fatal(err)
	}
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		k.t.Fatal(err)
	}
	gone := gatewaytest.Eventually(30*time.Second, 10*time.Millisecond, func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
	})
	if !gone {
		k.t.Fatalf("broker pid %d still alive after SIGKILL", pid)
	}
	return at
}

// freePortPair finds p such that p and p+1 are both free (client and
// controller listeners).
func freePortPair(t testing.TB) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no pair of free ports")
	return 0
}

// attempt is one POST of one event and its answer.
type attempt struct {
	id             string
	sent, answered time.Time
	status         int
	body           string
}

// outagePublisher posts events one at a time, each retried with the same
// id after every 503 (honouring Retry-After, at most maxWait) until 202.
type outagePublisher struct {
	g        *gatewayProc
	mu       sync.Mutex
	attempts []attempt
	acked    map[string]position
}

func (p *outagePublisher) publish(ctx context.Context, id, session string, maxWait time.Duration) error {
	ev := fmt.Sprintf(`{"aep_version":"0.1","id":%q,"type":"task.progress","source":"agent:outage","target":"tool:crawler","task_id":"task_01","session_id":%q,"created_at":"2026-07-09T10:00:00Z","payload":{}}`, id, session)
	for {
		a := attempt{id: id, sent: time.Now()}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, p.g.URL+"/aep/events", strings.NewReader(ev))
		if err != nil {
			cancel()
			return err
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			return fmt.Errorf("post %s: %w", id, err)
		}
		var rep ingestReply
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		a.answered, a.status, a.body = time.Now(), resp.StatusCode, string(b)
		p.mu.Lock()
		p.attempts = append(p.attempts, a)
		p.mu.Unlock()
		switch resp.StatusCode {
		case http.StatusAccepted:
			if json.Unmarshal(b, &rep) != nil || rep.Accepted != 1 || len(rep.Positions) != 1 {
				return fmt.Errorf("%s: 202 without its position: %s", id, b)
			}
			p.mu.Lock()
			p.acked[id] = rep.Positions[0]
			p.mu.Unlock()
			return nil
		case http.StatusServiceUnavailable:
			wait := maxWait
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && time.Duration(s)*time.Second < wait {
				wait = time.Duration(s) * time.Second
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: still not accepted: %w", id, ctx.Err())
			case <-time.After(wait):
			}
		default:
			return fmt.Errorf("%s: unexpected answer %d %s", id, resp.StatusCode, b)
		}
	}
}

// Broker outage on real Apache Kafka (issue 29, "Fail fast, answer
// unambiguously"): 8 publishers post events one at a time through one
// gateway and retry every 503 with the same event id; the test's own broker
// is SIGKILLed, left down ~10 s and restarted. Every answer to a request
// sent while the broker is down arrives within 5 s; /readyz goes down and
// up; ingest is accepted again within 2 s of the broker answering; at the
// end every event was acknowledged and is in the log exactly once, at the
// position its 202 named.
func TestBrokerOutageFailFastNoDuplicates(t *testing.T) {
	began := time.Now()
	k := startOwnKafka(t)
	t.Logf("own broker at %s up in %s", k.addr, time.Since(began).Round(time.Millisecond))
	prefix := strings.ReplaceAll(TopicName(t), "_", "-")
	g := startGateway(t, "--kafka-brokers", k.addr,
		"--topic-template", prefix+".{tenant}.events", "--topic-partitions", "3", "--topic-replication-factor", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	pub := &outagePublisher{g: g, acked: map[string]position{}}
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	// Each publisher starts one event every 40 ms (~25/s, 200/s in all),
	// each in its own request, so that requests are also sent while earlier
	// ones wait; at most 32 of a publisher's events are unanswered at once.
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, 32)
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				select {
				case slots <- struct{}{}:
				default:
					continue // all 32 waiting: skip this tick
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					id := fmt.Sprintf("evt_out_%d_%05d", p, seq)
					if err := pub.publish(ctx, id, fmt.Sprintf("sess_out_%d", p), time.Second); err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				}()
			}
		}()
	}
	ackedCount := func() int { pub.mu.Lock(); defer pub.mu.Unlock(); return len(pub.acked) }
	if !gatewaytest.Eventually(60*time.Second, 50*time.Millisecond, func() bool { return ackedCount() >= 200 }) {
		t.Fatalf("warm-up: only %d events acknowledged", ackedCount())
	}

	killedAt := k.kill()
	t.Logf("broker dead %s after SIGKILL", time.Since(killedAt).Round(time.Millisecond))
	readyz := func() int {
		resp, err := http.Get(g.URL + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if !gatewaytest.Eventually(10*time.Second, 20*time.Millisecond, func() bool { return readyz() == http.StatusServiceUnavailable }) {
		t.Fatal("/readyz did not go down after the broker was killed")
	}
	t.Logf("/readyz down %s after SIGKILL", time.Since(killedAt).Round(time.Millisecond))
	<-time.After(time.Until(killedAt.Add(10 * time.Second))) // the outage lasts 10 s before the restart starts

	restarted := make(chan error, 1)
	go func() { restarted <- k.script("up") }()
	// The broker "answers" from the first Metadata response that names a
	// leader for every partition of the tenant topic.
	var upAt time.Time
	if !gatewaytest.Eventually(3*time.Minute, 50*time.Millisecond, func() bool {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.RetryTimeout(time.Second))
		if err != nil {
			return false
		}
		defer cl.Close()
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		tds, err := kadm.NewClient(cl).ListTopics(pctx)
		if err != nil || len(tds) == 0 {
			return false
		}
		for name, td := range tds {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			if td.Err != nil || len(td.Partitions) == 0 {
				return false
			}
			for _, p := range td.Partitions {
				if p.Err != nil || p.Leader < 0 {
					return false
				}
			}
		}
		upAt = time.Now()
		return true
	}) {
		t.Fatal("restarted broker never answered")
	}
	t.Logf("broker answering %s after SIGKILL", upAt.Sub(killedAt).Round(time.Millisecond))
	if err := pub.publish(ctx, "evt_out_probe", "sess_out_probe", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	recovered := time.Since(upAt)
	t.Logf("ingest accepted again %s after the broker answered", recovered.Round(time.Millisecond))
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if !gatewaytest.Eventually(10*time.Second, 20*time.Millisecond, func() bool { return readyz() == http.StatusOK }) {
		t.Error("/readyz did not come back up after the broker did")
	}
	after := ackedCount()
	if !gatewaytest.Eventually(30*time.Second, 50*time.Millisecond, func() bool { return ackedCount() >= after+100 }) {
		t.Errorf("after the restart: %d events acknowledged, want %d", ackedCount(), after+100)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Answers to requests sent while the broker was down.
	var during, slow, s503 int
	var worst time.Duration
	for _, a := range pub.attempts {
		if a.sent.Before(killedAt) || a.sent.After(upAt) {
			continue
		}
		during++
		if a.status == http.StatusServiceUnavailable {
			s503++
		}
		d := a.answered.Sub(a.sent)
		worst = max(worst, d)
		if d > 5*time.Second {
			slow++
			if slow <= 5 {
				t.Errorf("%s sent %s after SIGKILL answered %d after %s: %s", a.id, a.sent.Sub(killedAt).Round(time.Millisecond),
					a.status, d.Round(time.Millisecond), a.body)
			}
		}
	}
	t.Logf("%d requests sent during the outage: %d answered 503, slowest answer %s, %d over 5 s", during, s503, worst.Round(time.Millisecond), slow)
	// The answers that said the event may be in the log, and what the
	// retries of those events got in the end.
	unknown := map[string]bool{}
	for _, a := range pub.attempts {
		if strings.Contains(a.body, `"in_log":"unknown"`) {
			unknown[a.id] = true
		}
	}
	t.Logf("%d events answered \"may be in the log\" at least once, all retried until 202", len(unknown))
	if during == 0 {
		t.Error("no request was sent while the broker was down")
	}
	if recovered > 2*time.Second {
		t.Errorf("ingest accepted again %s after the broker answered, want within 2 s", recovered)
	}

	// The log: every acknowledged event exactly once, where its 202 said.
	recs := readPrefixTopics(t, k.addr, prefix)
	seen := map[string][]position{}
	for _, r := range recs {
		var ev struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			t.Fatalf("record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		seen[ev.ID] = append(seen[ev.ID], position{Partition: r.Partition, Offset: r.Offset})
	}
	dups := 0
	for id, ps := range seen {
		if len(ps) > 1 {
			dups++
			if dups <= 10 {
				t.Errorf("event %s is in the log %d times: %v", id, len(ps), ps)
			}
		}
	}
	lost := 0
	for id, p := range pub.acked {
		ps := seen[id]
		if len(ps) == 0 {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged event %s (partition %d offset %d) is not in the log", id, p.Partition, p.Offset)
			}
			continue
		}
		if !slices.ContainsFunc(ps, func(q position) bool { return q.Partition == p.Partition && q.Offset == p.Offset }) {
			t.Errorf("event %s acknowledged at %d/%d is in the log at %v", id, p.Partition, p.Offset, ps)
		}
	}
	t.Logf("%d events acknowledged, %d records in the log, %d ids duplicated, %d lost; wall time %s",
		len(pub.acked), len(recs), dups, lost, time.Since(began).Round(time.Millisecond))
}

// readPrefixTopics reads every record of the topics whose names start with
// prefix, up to their end offsets now.
func readPrefixTopics(t *testing.T, addr, prefix string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ac := kadm.NewClient(adm)
	tds, err := ac.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for name := range tds {
		if strings.HasPrefix(name, prefix) {
			topics = append(topics, name)
		}
	}
	ends, err := ac.ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %v before the deadline", len(out), want, topics)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}
