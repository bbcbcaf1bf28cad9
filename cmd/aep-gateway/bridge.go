package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/bridge"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// roleBridge runs only the bridges turned on.
const roleBridge = "bridge"

// bridgeHere says whether this process runs bridges.
func (c config) bridgeHere() bool {
	on := c.CloudEventsBridge || c.OCSFBridge || c.OTLPLogsEndpoint != ""
	return on && c.Role != roleWorker && c.Role != roleSealer
}

// parseHeaderList reads k=v,k=v (values URL-decoded).
func parseHeaderList(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value", kv)
		}
		dv, err := url.QueryUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", kv, err)
		}
		out[k] = dv
	}
	return out, nil
}

// startBridges runs the bridges turned on until lc stops them; the channel
// yields the error of the first that stops by itself. The topic bridges'
// transactional ids are their group and --node-id: a restarted process
// with the same node id fences its predecessor's open transaction at once;
// with a random one that transaction blocks read_committed readers until
// the broker times it out.
func startBridges(cfg config, opts []kgo.Opt, naming partitioning.Naming, reg prometheus.Registerer, log zerolog.Logger, lc *lifecycle) (<-chan error, error) {
	rules, err := bridge.LoadRules(cfg.BridgeRules)
	if err != nil {
		return nil, err
	}
	metrics, err := bridge.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	id := cfg.NodeID
	if id == "" && (cfg.CloudEventsBridge || cfg.OCSFBridge) {
		id = ulid.Make().String()
		log.Warn().Str("instance", id).Msg("bridges: no --node-id; a random transactional id means a killed bridge's open transaction holds read_committed readers until the broker aborts it")
	}
	re := filterworker.TopicRegexp(naming)
	type owned struct {
		name string
		run  func(context.Context) error
	}
	var runs []owned
	ce := bridge.CloudEvents
	if cfg.CloudEventsMode == "binary" {
		ce = bridge.CloudEventsBinary
	}
	for _, tb := range []struct {
		on      bool
		p       bridge.Projection
		group   string
		ceiling string
	}{{cfg.CloudEventsBridge, ce, cfg.CloudEventsGroup, cfg.CloudEventsMaxCapture},
		{cfg.OCSFBridge, bridge.OCSF, cfg.OCSFGroup, cfg.OCSFMaxCapture}} {
		if !tb.on {
			continue
		}
		ceiling, _ := aep.ParseCapture(tb.ceiling) // validated by parseConfig
		b, err := bridge.NewTopic(bridge.TopicConfig{Projection: tb.p, ClientOpts: opts, Naming: naming, TopicRegexp: re,
			Group: tb.group, InstanceID: id, MaxCapture: ceiling, Rules: rules, ReplicationFactor: int16(cfg.TopicReplicationFactor),
			Logger: log, Metrics: metrics})
		if err != nil {
			return nil, err
		}
		runs = append(runs, owned{tb.p.Name + " bridge", b.Run})
	}
	if cfg.OTLPLogsEndpoint != "" {
		ceiling, _ := aep.ParseCapture(cfg.OTLPLogsMaxCapture)
		headers, _ := parseHeaderList(cfg.OTLPLogsHeaders)
		b, err := bridge.NewOTLP(bridge.OTLPConfig{Endpoint: cfg.OTLPLogsEndpoint, Headers: headers, Timeout: cfg.OTLPLogsTimeout,
			ClientOpts: opts, TopicRegexp: re, Group: cfg.OTLPLogsGroup, MaxCapture: ceiling, Rules: rules, Logger: log, Metrics: metrics})
		if err != nil {
			return nil, err
		}
		runs = append(runs, owned{"otlp bridge", b.Run})
	}
	if len(runs) == 0 {
		return nil, errors.New("no bridge is turned on")
	}
	failed := make(chan error, len(runs)) // each bridge sends at most once: never blocks
	for _, r := range runs {
		run, name := r.run, r.name
		runOwned(name, func(ctx context.Context) error {
			err := run(ctx)
			if err != nil && ctx.Err() == nil {
				failed <- fmt.Errorf("%s: %w", name, err)
			}
			return err
		}, lc)
	}
	return failed, nil
}
