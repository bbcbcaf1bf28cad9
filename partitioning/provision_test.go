package partitioning

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func newAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func TestProvisionerCreatesTenantTopics(t *testing.T) {
	adm := newAdmin(t)
	p, err := NewProvisioner(adm, Naming{}, TopicConfig{Partitions: 4, ReplicationFactor: 1, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	infos := make([]TopicInfo, 8)
	errs := make([]error, 8)
	for i := range infos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos[i], errs[i] = p.Ensure(ctx, "acme")
		}()
	}
	wg.Wait()
	for i := range infos {
		if errs[i] != nil {
			t.Fatalf("ensure %d: %v", i, errs[i])
		}
		if infos[i] != infos[0] {
			t.Fatalf("concurrent ensures disagree: %+v vs %+v", infos[i], infos[0])
		}
	}
	if infos[0].Name != "aep.acme.events" || infos[0].Partitions != 4 || infos[0].ID == [16]byte{} {
		t.Fatalf("info = %+v", infos[0])
	}

	rc, err := adm.DescribeTopicConfigs(ctx, "aep.acme.events", "aep.acme.events.index")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"aep.acme.events":       {"cleanup.policy": "delete", "retention.ms": "3600000"},
		"aep.acme.events.index": {"cleanup.policy": "compact"},
	}
	for _, r := range rc {
		for k, v := range want[r.Name] {
			got := ""
			for _, c := range r.Configs {
				if c.Key == k && c.Value != nil {
					got = *c.Value
				}
			}
			if got != v {
				t.Errorf("%s %s = %q, want %q", r.Name, k, got, v)
			}
		}
	}

	// A second provisioner (another gateway node) finds the topics in place.
	p2, _ := NewProvisioner(adm, Naming{}, TopicConfig{Partitions: 4, ReplicationFactor: 1})
	info2, err := p2.Ensure(ctx, "acme")
	if err != nil || info2 != infos[0] {
		t.Fatalf("second node: %+v %v", info2, err)
	}
	if _, err := p.Ensure(ctx, "bad.tenant"); err == nil {
		t.Fatal("invalid tenant provisioned")
	}
}

func TestTopicConfigValidate(t *testing.T) {
	bad := []TopicConfig{{Partitions: -1}, {ReplicationFactor: -2}, {Retention: -5}}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if (TopicConfig{}).Validate() != nil {
		t.Error("zero config rejected")
	}
}
