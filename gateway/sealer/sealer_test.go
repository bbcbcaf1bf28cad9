package sealer

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
	"github.com/aep-gateway/aep-gateway/internal/auditlog"
	"github.com/aep-gateway/aep-gateway/internal/auditread"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

const tenant = "t1"

type env struct {
	k      *gatewaytest.Kafka
	signer *auditlog.Signer
	naming partitioning.Naming
}

func newEnv(t *testing.T, parts int32) *env {
	t.Helper()
	s, _, err := auditlog.LoadOrCreateSigner(t.TempDir() + "/audit.key")
	if err != nil {
		t.Fatal(err)
	}
	return &env{k: gatewaytest.NewKafka(t, tenant, parts), signer: s}
}

func (e *env) opts() []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(e.k.Cluster.ListenAddrs()...)} }

// produce writes n events round-robin over the partitions.
func (e *env) produce(t *testing.T, from, n int) {
	t.Helper()
	recs := make([]*kgo.Record, 0, n)
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Topic: e.k.Topic, Partition: int32(i) % e.k.Parts, Key: []byte(fmt.Sprintf("s%d", i%50)),
			Value: []byte(fmt.Sprintf(`{"id":"evt_%d"}`, i)), Headers: []kgo.RecordHeader{{Key: "aep-type", Value: []byte("task.progress")}}})
	}
	if err := e.k.Prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// run starts a sealer in group until the test ends or stop is called.
func (e *env) run(t *testing.T, group string, reg prometheus.Registerer) (stop func() error) {
	t.Helper()
	s, err := New(Config{ClientOpts: e.opts(), Naming: e.naming, TopicRegexp: filterworker.TopicRegexp(e.naming), Signer: e.signer,
		Group: group, Interval: 50 * time.Millisecond, SessionTimeout: 6 * time.Second, MetadataMaxAge: 200 * time.Millisecond,
		Logger: zerolog.New(io.Discard), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// sealedAll waits until every record of the topic verifies as sealed.
func (e *env) sealedAll(t *testing.T, want int) auditlog.Report {
	t.Helper()
	var rep auditlog.Report
	keys := auditlog.Keys{}
	keys.Add(e.signer.Public())
	gatewaytest.Poll(t, "every record sealed", func() bool {
		parts, err := auditread.Read(context.Background(), e.opts(), auditread.Topics{Events: e.k.Topic, Audit: e.naming.Audit(tenant)}, auditread.Visitor{})
		if err != nil {
			return false
		}
		rep = auditlog.Verify(tenant, keys, parts)
		var verified uint64
		for _, p := range rep.Partitions {
			verified += p.Verified
		}
		if !rep.OK {
			t.Fatalf("verification failed: %v", rep.Findings)
		}
		return verified == uint64(want)
	})
	return rep
}

// Sealers that compete (two groups seal every partition at once, at
// their own moments) and restart never sign two heads for one size: the
// verification, which reports any fork, passes over every record.
func TestCompetingAndRestartedSealersAgree(t *testing.T) {
	e := newEnv(t, 3)
	e.produce(t, 0, 2000)
	stopA := e.run(t, "sealers-a", nil)
	e.run(t, "sealers-b", nil)
	e.produce(t, 2000, 2000)
	time.Sleep(300 * time.Millisecond)
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	e.produce(t, 4000, 1000)
	e.run(t, "sealers-a", nil) // continues from the audit topic
	e.produce(t, 5000, 1000)
	rep := e.sealedAll(t, 6000)
	for _, p := range rep.Partitions {
		if p.Epochs != 1 || p.Checkpoints < 2 {
			t.Fatalf("partition %d: %+v", p.Partition, p)
		}
	}
}

// A partition whose last checkpoint does not verify (another key signed
// it, or it does not decode) is refused: not sealed, counted, and its
// chain is not continued with heads nobody can link.
func TestUnverifiableLastCheckpointIsRefused(t *testing.T) {
	e := newEnv(t, 2)
	e.produce(t, 0, 100)
	stop := e.run(t, "sealers", nil)
	e.sealedAll(t, 100)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// a forged checkpoint at the end of audit partition 1
	other := auditlog.NewSigner(auditlog.TestKey(9))
	c := auditlog.NewChain(tenant, 1)
	c.Append(1, auditlog.ContentHash(auditlog.Record{Value: []byte("forged")}), 0)
	cp := c.Checkpoint(other)
	if err := e.k.Prod.ProduceSync(context.Background(), &kgo.Record{Topic: e.naming.Audit(tenant), Partition: 1, Value: cp.Marshal()}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e.run(t, "sealers", reg)
	e.produce(t, 100, 100)
	gatewaytest.Poll(t, "partition 1 refused", func() bool {
		v, _, _ := gatewaytest.MetricSeries(t, reg, "aep_audit_partitions_refused_total", nil)
		return v == 1
	})
	keys := auditlog.Keys{}
	keys.Add(e.signer.Public())
	gatewaytest.Poll(t, "partition 0 sealed on", func() bool {
		parts, err := auditread.Read(context.Background(), e.opts(), auditread.Topics{Events: e.k.Topic, Audit: e.naming.Audit(tenant)}, auditread.Visitor{})
		if err != nil {
			return false
		}
		rep := auditlog.Verify(tenant, keys, parts)
		return rep.Partitions[0].Verified == 100 && rep.Partitions[1].Unsealed == 50 && !rep.OK
	})
}
