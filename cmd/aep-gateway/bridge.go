package main

import (
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/cebridge"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// roleBridge runs only the CloudEvents bridge.
const roleBridge = "bridge"

// bridgeHere says whether this process runs the CloudEvents bridge.
func (c config) bridgeHere() bool {
	return c.Role == roleBridge || (c.CloudEventsBridge && c.Role != roleWorker && c.Role != roleSealer)
}

// startBridge runs the CloudEvents bridge until lc stops it; the channel
// yields its error if it stops by itself. Its transactional id is the
// group and --node-id: a restarted process with the same node id fences
// its predecessor's open transaction at once; with a random one that
// transaction blocks read_committed readers until the broker times it out.
func startBridge(cfg config, opts []kgo.Opt, naming partitioning.Naming, reg prometheus.Registerer, log zerolog.Logger, lc *lifecycle) (<-chan error, error) {
	ceiling, _ := aep.ParseCapture(cfg.CloudEventsMaxCapture) // validated by parseConfig
	id := cfg.NodeID
	if id == "" {
		id = ulid.Make().String()
		log.Warn().Str("instance", id).Msg("cloudevents bridge: no --node-id; a random transactional id means a killed bridge's open transaction holds read_committed readers until the broker aborts it")
	}
	b, err := cebridge.New(cebridge.Config{ClientOpts: opts, Naming: naming, TopicRegexp: filterworker.TopicRegexp(naming),
		Group: cfg.CloudEventsGroup, InstanceID: id, MaxCapture: ceiling, ReplicationFactor: int16(cfg.TopicReplicationFactor),
		Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	return runOwned("cloudevents bridge", b.Run, lc), nil
}
