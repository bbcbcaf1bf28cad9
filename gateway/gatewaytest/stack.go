// Package gatewaytest builds a whole gateway ingest stack on an in-process
// Kafka-protocol broker (kfake) for tests of the bindings built on it: a
// cluster, the gateway's producer, the topic provisioner, the gateway Server
// and a cursor keyring, each closed by t.Cleanup. It is for tests only and
// imports nothing built on the gateway, so any package's tests may use it.
package gatewaytest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/cursor"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Stack is a gateway on kfake.
type Stack struct {
	Cluster     *kfake.Cluster
	Seeds       kgo.Opt      // kgo.SeedBrokers of the cluster
	Client      *kgo.Client  // the gateway's producer client
	Admin       *kadm.Client // over Client
	Provisioner *partitioning.Provisioner
	Server      *gateway.Server
	Keyring     *cursor.Keyring // a fixed test key (id 1)
}

// Options tune a Stack; zero fields mean 3 partitions and a gateway.Config
// with a discarding logger.
type Options struct {
	Partitions int32
	Config     func(*gateway.Config)
}

// New builds a Stack whose parts are closed when tb ends. The Server's
// Handler is not served: callers mount their bindings and serve it.
func New(tb testing.TB, o Options) *Stack {
	tb.Helper()
	if o.Partitions == 0 {
		o.Partitions = 3
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cluster.Close)
	seeds := kgo.SeedBrokers(cluster.ListenAddrs()...)
	cl, err := kgo.NewClient(append([]kgo.Opt{seeds}, gateway.NewProducerOpts(gateway.DefaultLimits.MaxEventBytes, 5*time.Second)...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	prov, err := partitioning.NewProvisioner(adm, partitioning.Naming{}, partitioning.TopicConfig{Partitions: o.Partitions, ReplicationFactor: 1})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := gateway.Config{Logger: zerolog.New(io.Discard)}
	if o.Config != nil {
		o.Config(&cfg)
	}
	srv, err := gateway.New(cfg, gateway.Deps{Topics: prov, Writer: gateway.KafkaWriter{Client: cl}, Pinger: cl})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	kr, err := cursor.NewKeyring(cursor.Key{ID: 1, Secret: []byte("0123456789abcdef0123")})
	if err != nil {
		tb.Fatal(err)
	}
	return &Stack{Cluster: cluster, Seeds: seeds, Client: cl, Admin: adm, Provisioner: prov, Server: srv, Keyring: kr}
}
