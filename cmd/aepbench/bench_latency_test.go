package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic that appears only after the first listing (as one created a
// moment ago may) is waited for, and never listed as partition -1; one that
// never appears ends in an error when the context does.
func TestEndOffsetsWaitsForTheTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A short metadata age so that the retries see the new topic soon
	// (franz-go's default keeps a listing for 5s).
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		time.Sleep(300 * time.Millisecond)
		if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, "late"); err != nil {
			t.Error(err)
		}
	})
	at, err := endOffsets(context.Background(), adm, "late", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(at) != 3 {
		t.Fatalf("offsets %v", at)
	}
	for p := range at {
		if p < 0 || p > 2 {
			t.Fatalf("partition %d listed", p)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if at, err := endOffsets(ctx, adm, "never", 3); err == nil {
		t.Fatalf("a missing topic listed: %v", at)
	}
}
