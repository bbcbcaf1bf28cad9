package integration

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// startEmbedded starts an in-process single-broker kfake cluster for t, persisting to t.TempDir().
func startEmbedded(t testing.TB) *Broker {
	t.Helper()
	dir := t.TempDir() // registered first, so removed after the cluster has closed
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir))
	if err != nil {
		t.Fatalf("integration: embedded broker: %v", err)
	}
	t.Cleanup(c.Close)
	return &Broker{Seeds: c.ListenAddrs(), Kind: KindEmbedded}
}
