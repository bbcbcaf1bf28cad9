package integration

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/internal/auditlog"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// auditSetup is a gateway cluster whose sealer runs, and what the audit
// commands need to read its log.
type auditSetup struct {
	nodes   []*gatewayProc
	brokers string
	naming  partitioning.Naming
	keys    string // the public key file
	args    []string
}

// writeAuditKey writes an Ed25519 signing key and its public key to dir.
func writeAuditKey(t *testing.T, dir string) (priv, pub string) {
	t.Helper()
	k := auditlog.TestKey(42)
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub = filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, auditlog.MarshalPublicPEM(auditlog.NewSigner(k).Public()), 0o600); err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// auditVerify runs aepctl audit verify -o json with extra args; it returns
// the report and the exit code.
func auditVerify(ctx context.Context, t *testing.T, s *auditSetup, tenant string, extra ...string) (auditlog.Report, int) {
	t.Helper()
	args := append([]string{"audit", "verify", "--brokers", s.brokers, "--tenant", tenant, "--topic-template", s.naming.Template,
		"--keys", s.keys, "-o", "json"}, extra...)
	var out, errb bytes.Buffer
	cmd := aepctlCmd(ctx, t, s.nodes[0], "", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	var rep auditlog.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("audit verify exit %d: %v\nstdout: %s\nstderr: %s", code, err, out.String(), errb.String())
	}
	return rep, code
}

// waitSealed waits until every record of the tenant verifies as sealed.
func waitSealed(ctx context.Context, t *testing.T, s *auditSetup, tenant string, want uint64) auditlog.Report {
	t.Helper()
	var rep auditlog.Report
	var code int
	ok := gatewaytest.Eventually(90*time.Second, 500*time.Millisecond, func() bool {
		rep, code = auditVerify(ctx, t, s, tenant)
		var verified uint64
		unsealed := 0
		for _, p := range rep.Partitions {
			verified += p.Verified
			unsealed += p.Unsealed
		}
		return code == 0 && verified == want && unsealed == 0
	})
	if !ok {
		t.Fatalf("tenant %s not sealed: exit %d, %+v, findings %v", tenant, code, rep.Partitions, rep.Findings)
	}
	return rep
}

// publishAudit posts n events of tenant's key over sessions sessions,
// alternating the nodes, in NDJSON batches of 250.
func publishAudit(ctx context.Context, t *testing.T, nodes []*gatewayProc, key, tag string, n, sessions int) {
	t.Helper()
	var batch []string
	flush := func(i int) {
		g := nodes[i%len(nodes)]
		res, err := g.post(ctx, "/aep/events", "application/x-ndjson", map[string]string{"Authorization": "Bearer " + key}, strings.Join(batch, "\n")+"\n")
		if err != nil || res.status != 202 {
			t.Fatalf("publish: %v %d %s", err, res.status, res.body)
		}
		batch = batch[:0]
	}
	for i := range n {
		batch = append(batch, dEvent(i, fmt.Sprintf("%s_s%02d", tag, i%sessions)))
		if len(batch) == 250 {
			flush(i / 250)
		}
	}
	if len(batch) > 0 {
		flush(n)
	}
}

// Sealed logs verify; every tampering of a copy of the log is named by
// partition and offset; an inclusion proof checks offline and fails when
// altered. On real Apache Kafka (the suite's broker) and on the embedded
// broker, two gateways, both sealing (one group: they split the
// partitions), one of them killed and restarted while events flow.
func TestAuditSealedLogVerifies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	priv, pub := writeAuditKey(t, dir)
	keyFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keyFile, []byte(keyFileLine("acme", "k-acme")+keyFileLine("globex", "k-globex")), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--api-keys", keyFile, "--audit-seal", "on", "--audit-signing-key", priv, "--audit-checkpoint-interval", "200ms"}

	t.Run("kafka", func(t *testing.T) {
		b := StartBroker(t)
		prefix := strings.ReplaceAll(TopicName(t), "_", "-")
		s := &auditSetup{brokers: strings.Join(b.Seeds, ","), naming: partitioning.Naming{Template: prefix + ".{tenant}.events"}, keys: pub}
		s.args = append([]string{"--kafka-brokers", s.brokers, "--topic-template", s.naming.Template, "--topic-partitions", "3",
			"--topic-replication-factor", "1", "--audit-sealer-group", prefix + "-sealers"}, common...)
		for range 2 {
			s.nodes = append(s.nodes, startGateway(t, s.args...))
		}
		// and a sealer-only process in a group of its own (--role sealer:
		// /metrics, /healthz, /readyz on --listen): it seals every
		// partition beside the gateways' group, the competing case, and
		// verification below finds no two heads for one size
		sealerArgs := append(append([]string{"--role", "sealer"}, s.args...), "--audit-sealer-group", prefix+"-sealers-2")
		sp := startGateway(t, sealerArgs...)
		auditScenario(ctx, t, s, b.Client(t))
		// Alone in its group it owns all 6 partitions of the two tenants;
		// it continues each chain from the audit partition's last
		// checkpoint, so what it seals itself depends on when it joined
		// (records the gateways' group sealed first are not sealed again).
		metric := func(name string) float64 {
			resp, err := http.Get(sp.URL + "/metrics")
			if err != nil {
				return -1
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			v := -1.0
			for _, line := range strings.Split(string(b), "\n") {
				if rest, ok := strings.CutPrefix(line, name+" "); ok {
					_, _ = fmt.Sscan(rest, &v)
				}
			}
			return v
		}
		if !gatewaytest.Eventually(60*time.Second, 500*time.Millisecond, func() bool { return metric("aep_audit_partitions") == 6 }) {
			t.Fatalf("the sealer process owns %v partitions, want 6", metric("aep_audit_partitions"))
		}
		sealed := metric("aep_audit_records_sealed_total")
		// what both groups wrote verifies: no fork, every record sealed
		for _, tenant := range []string{"acme", "globex"} {
			waitSealed(ctx, t, s, tenant, 5000)
		}
		t.Logf("the --role sealer process sealed %v records", sealed)
	})
	t.Run("embedded", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		first := append([]string{"--data-dir", data, "--embedded-kafka-listen", "127.0.0.1:0", "--topic-partitions", "3"}, common...)
		g1 := startGateway(t, first...)
		s := &auditSetup{brokers: g1.KafkaAddr, naming: partitioning.Naming{}, keys: pub,
			args: append([]string{"--kafka-brokers", g1.KafkaAddr, "--topic-replication-factor", "1"}, common...)}
		s.nodes = []*gatewayProc{g1, startGateway(t, s.args...)}
		cl, err := kgo.NewClient(kgo.SeedBrokers(g1.KafkaAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		auditScenario(ctx, t, s, cl)

		// A partition truncated and refilled: its files removed while the
		// broker is down, new events written after. (The embedded broker
		// keeps the partition's offsets: the lost ones come back as empty
		// filler records, so no offset is reused and the sealer's chain goes
		// on.) Verify names the partition and its first lost offset.
		s.nodes[1].stop()
		cl.Close()
		g1.stop()
		topic := s.naming.Events("acme")
		pdir := filepath.Join(data, "kafka", "partitions", topic+"-1")
		if err := os.RemoveAll(pdir); err != nil {
			t.Fatal(err)
		}
		g1 = startGateway(t, first...)
		s.nodes = []*gatewayProc{g1}
		s.brokers = g1.KafkaAddr
		publishAudit(ctx, t, s.nodes, "k-acme", "refill", 300, 25)
		var rep auditlog.Report
		var code int
		ok := gatewaytest.Eventually(60*time.Second, 500*time.Millisecond, func() bool {
			rep, code = auditVerify(ctx, t, s, "acme")
			return code == 5 && firstFinding(rep, 1) != nil
		})
		if !ok {
			dbg, _ := kgo.NewClient(kgo.SeedBrokers(g1.KafkaAddr))
			recs := readAllRecords(ctx, t, dbg, topic)[1]
			t.Logf("partition 1 now: %d records, first offset %d value %s, last offset %d value %s", len(recs), recs[0].Offset, recs[0].Value, recs[len(recs)-1].Offset, recs[len(recs)-1].Value)
			dbg.Close()
			t.Fatalf("the refilled partition: exit %d, %+v, %v", code, rep.Partitions, rep.Findings)
		}
		f := firstFinding(rep, 1)
		if f == nil || f.Offset != 0 || (f.Kind != auditlog.KindModified && f.Kind != auditlog.KindTruncated) {
			t.Fatalf("refilled partition: first finding %v, want offset 0 of partition 1 (all %v)", f, rep.Findings)
		}
		t.Logf("truncated and refilled: %v", *f)
	})
}

func firstFinding(rep auditlog.Report, p int32) *auditlog.Finding {
	for _, f := range rep.Findings {
		if f.Partition == p {
			return &f
		}
	}
	return nil
}

func auditScenario(ctx context.Context, t *testing.T, s *auditSetup, cl *kgo.Client) {
	t.Helper()
	// 10k events over 50 sessions of two tenants, through both nodes;
	// node 2 (a sealer) killed and restarted mid-way.
	publishAudit(ctx, t, s.nodes, "k-acme", "acme", 2500, 25)
	publishAudit(ctx, t, s.nodes, "k-globex", "globex", 2500, 25)
	time.Sleep(300 * time.Millisecond)
	s.nodes[1].kill()
	publishAudit(ctx, t, s.nodes[:1], "k-acme", "acme2", 2500, 25)
	s.nodes[1] = startGateway(t, s.args...)
	publishAudit(ctx, t, s.nodes, "k-globex", "globex2", 2500, 25)
	for _, tenant := range []string{"acme", "globex"} {
		rep := waitSealed(ctx, t, s, tenant, 5000)
		t.Logf("tenant %s: %+v", tenant, rep.Partitions)
	}

	// Tampered copies of acme's events topic against its audit topic.
	src := s.naming.Events("acme")
	audit := s.naming.Audit("acme")
	recs := readAllRecords(ctx, t, cl, src)
	p := int32(0)
	for len(recs[p]) < 10 {
		p++
	}
	n := int64(len(recs[p]))
	mid := n / 2
	cases := []struct {
		name   string
		edit   func([]*kgo.Record) []*kgo.Record
		kind   string
		offset int64
	}{
		{"value changed", func(rs []*kgo.Record) []*kgo.Record {
			rs[mid].Value = bytes.Replace(rs[mid].Value, []byte(`"payload":{"i":`), []byte(`"payload":{"i":1`), 1)
			return rs
		}, auditlog.KindModified, mid},
		{"record dropped", func(rs []*kgo.Record) []*kgo.Record { return append(rs[:mid:mid], rs[mid+1:]...) }, auditlog.KindMissing, mid},
		{"records swapped", func(rs []*kgo.Record) []*kgo.Record { rs[mid], rs[mid+1] = rs[mid+1], rs[mid]; return rs }, auditlog.KindReordered, mid},
		{"header changed", func(rs []*kgo.Record) []*kgo.Record {
			for i, h := range rs[mid].Headers {
				if h.Key == partitioning.HeaderType {
					rs[mid].Headers[i].Value = []byte("task.done")
				}
			}
			return rs
		}, auditlog.KindModified, mid},
		{"record inserted", func(rs []*kgo.Record) []*kgo.Record {
			forged := *rs[mid]
			forged.Value = []byte(strings.Replace(string(forged.Value), `"id":"evt_`, `"id":"evt_forged_`, 1))
			return append(append(rs[:mid:mid], &forged), rs[mid:]...)
		}, auditlog.KindInserted, mid},
	}
	for _, c := range cases {
		copyTopic := copyWith(ctx, t, cl, src, recs, p, c.edit)
		rep, code := auditVerify(ctx, t, s, "acme", "--events-topic", copyTopic, "--audit-topic", audit)
		f := firstFinding(rep, p)
		if code != 5 || f == nil || f.Kind != c.kind || f.Offset != c.offset {
			t.Errorf("%s at partition %d offset %d: exit %d, first finding %v, want %s there (all %v)", c.name, p, c.offset, code, f, c.kind, rep.Findings)
			continue
		}
		t.Logf("%s: exit 5, %v", c.name, *f)
	}

	// An inclusion proof: checks offline, fails once altered.
	id := "evt_acme_s03_0003"
	proof := aepctlOK(ctx, t, s.nodes[0], "", "audit", "prove", id, "--brokers", s.brokers, "--tenant", "acme",
		"--topic-template", s.naming.Template, "--keys", s.keys)
	dir := t.TempDir()
	good := filepath.Join(dir, "proof.json")
	if err := os.WriteFile(good, []byte(proof), 0o600); err != nil {
		t.Fatal(err)
	}
	aepctlOK(ctx, t, s.nodes[0], "", "audit", "check-proof", "--keys", s.keys, good)
	// the same from the gateway's endpoint, on the other node
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.nodes[1].URL+"/aep/audit/events/"+id+"/proof", nil)
	req.Header.Set("Authorization", "Bearer k-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET proof: %d %s", resp.StatusCode, body)
	}
	fromGateway := filepath.Join(dir, "gateway-proof.json")
	if err := os.WriteFile(fromGateway, body, 0o600); err != nil {
		t.Fatal(err)
	}
	aepctlOK(ctx, t, s.nodes[0], "", "audit", "check-proof", "--keys", s.keys, fromGateway)
	var pf map[string]any
	if err := json.Unmarshal([]byte(proof), &pf); err != nil {
		t.Fatal(err)
	}
	path, _ := pf["audit_path"].([]any)
	first, _ := path[0].(string)
	for name, bad := range map[string]string{
		"offset":     strings.Replace(proof, fmt.Sprintf(`"offset":%v`, pf["offset"]), fmt.Sprintf(`"offset":%v`, pf["offset"].(float64)+1), 1),
		"audit path": strings.Replace(proof, first, flipHex(first), 1),
		"root":       strings.Replace(proof, pf["head"].(map[string]any)["root"].(string), flipHex(pf["head"].(map[string]any)["root"].(string)), 1),
	} {
		if bad == proof {
			t.Fatalf("%s: the mutation changed nothing", name)
		}
		f := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(f, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := aepctlCmd(ctx, t, s.nodes[0], "", "audit", "check-proof", "--keys", s.keys, f)
		var ee *exec.ExitError
		if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 5 {
			t.Errorf("a proof with its %s altered: %v, want exit 5", name, err)
		}
	}
}

func flipHex(s string) string {
	b := []byte(s)
	if b[0] == '0' {
		b[0] = '1'
	} else {
		b[0] = '0'
	}
	return string(b)
}

// readAllRecords reads every record of topic, by partition.
func readAllRecords(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) map[int32][]*kgo.Record {
	t.Helper()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]*kgo.Record{}
	at := map[int32]kgo.Offset{}
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			at[o.Partition] = kgo.NewOffset().At(0)
			left++
		}
	})
	rd, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for left > 0 {
		fs := rd.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			if e, _ := ends.Lookup(topic, r.Partition); r.Offset == e.Offset-1 {
				left--
			}
		})
	}
	return out
}

// copyWith copies every partition of src (recs) to a new topic, partition
// p edited by edit; records keep key, value, headers and timestamp.
func copyWith(ctx context.Context, t *testing.T, cl *kgo.Client, src string, recs map[int32][]*kgo.Record, p int32, edit func([]*kgo.Record) []*kgo.Record) string {
	t.Helper()
	dst := fmt.Sprintf("%s.copy%d", src, time.Now().UnixNano())
	adm := kadm.NewClient(cl)
	parts := int32(0)
	for q := range recs {
		parts = max(parts, q+1)
	}
	if _, err := adm.CreateTopic(ctx, max(parts, 3), 1, nil, dst); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopic(context.Background(), dst) })
	prod, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for q, rs := range recs {
		cp := make([]*kgo.Record, len(rs))
		for i, r := range rs {
			c := &kgo.Record{Topic: dst, Partition: q, Key: r.Key, Value: append([]byte(nil), r.Value...), Timestamp: r.Timestamp,
				Headers: append([]kgo.RecordHeader(nil), r.Headers...)}
			cp[i] = c
		}
		if q == p {
			cp = edit(cp)
		}
		if err := prod.ProduceSync(ctx, cp...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
