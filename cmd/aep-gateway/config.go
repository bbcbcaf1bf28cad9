package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway"
	"github.com/aep-gateway/aep-gateway/gateway/bridge"
	"github.com/aep-gateway/aep-gateway/gateway/dialectr"
	"github.com/aep-gateway/aep-gateway/gateway/engine"
	"github.com/aep-gateway/aep-gateway/gateway/filterworker"
	"github.com/aep-gateway/aep-gateway/gateway/forward"
	"github.com/aep-gateway/aep-gateway/gateway/ingest/dedup"
	"github.com/aep-gateway/aep-gateway/gateway/sealer"
	"github.com/aep-gateway/aep-gateway/internal/tracing"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// config is everything the server binary is told, from flags and their
// AEP_* environment twins.
type config struct {
	// UnknownEnv are AEP_ variables that name no flag (warned at start).
	UnknownEnv []string

	Listen               string
	AdminListen          string
	TLSCertFile          string
	TLSKeyFile           string
	TLSClientCA          string
	APIKeys              string
	CursorKeys           string
	JWTSecretFile        string
	JWTPublicKey         string
	JWTTenantClaim       string
	JWTIssuer            string
	JWTAudience          string
	JWTLeeway            time.Duration
	AllowUnauthenticated bool
	Console              bool

	KafkaBrokers          string
	KafkaTLS              bool
	KafkaTLSCA            string
	KafkaTLSCert          string
	KafkaTLSKey           string
	KafkaTLSServerName    string
	KafkaSASLMechanism    string
	KafkaSASLUser         string
	KafkaSASLPassword     string
	KafkaSASLPasswordFile string

	DataDir             string
	EmbeddedKafkaListen string
	EmbeddedSyncWrites  bool

	TopicTemplate          string
	TopicPartitions        int
	TopicReplicationFactor int
	TopicRetention         time.Duration
	TopicRetentionBytes    int64
	TopicManagement        string
	KeyStrategy            string

	MaxBodyBytes        int64
	MaxEventBytes       int
	MaxBatchEvents      int
	ValidatePayloads    bool
	RateLimit           float64
	ReplayBuffer        int
	ControlPolicy       string
	NodeID              string
	MaxStreamsPerTenant int
	ParkIdleStreams     bool
	MaxDurablePerTenant int
	AdHocGrace          time.Duration
	RateBurst           int

	MaxConnections            int
	MaxConnectionsPerIP       int
	TrustedProxies            string
	IdleTimeout               time.Duration
	ReadTimeout               time.Duration
	MaxInflightBytesPerTenant int64
	CORSAllowedOrigins        string
	JWTJWKSURL                string
	JWTJWKSFile               string
	JWTJWKSRefresh            time.Duration
	AuthReloadInterval        time.Duration

	WriteTimeout    time.Duration
	ProduceTimeout  time.Duration
	DedupWindow     time.Duration
	DedupMaxEvents  int
	PartitionCheck  time.Duration
	MemoryBudget    int64
	CatchUpRate     int64
	TenantCatchUp   int64
	TenantBudget    int64
	ShutdownTimeout time.Duration
	DrainDelay      time.Duration
	LogFormat       string
	LogLevel        string
	AccessLogSample int

	OTLPEndpoint     string
	OTelServiceName  string
	TraceSampleRatio float64

	MetricsMaxTenants         int
	MetricsSubscriptionLagTop int

	// Workers live-delivery mode (docs/scaling.md).
	Role                   string
	LiveDelivery           string
	LiveRegistryTopic      string
	LiveDeliveryTopic      string
	LiveDeliveryPartitions int
	FilterWorkerGroup      string

	// Audit sealer (docs/audit.md).
	AuditSeal       string
	TaskStates      bool
	TaskStatesGroup string
	AuditSigningKey string
	AuditPublicKeys string
	AuditInterval   time.Duration
	AuditGroup      string

	// Bridges (docs/analytics.md).
	CloudEventsBridge     bool
	CloudEventsMaxCapture string
	CloudEventsGroup      string
	CloudEventsMode       string
	OCSFBridge            bool
	OCSFMaxCapture        string
	OCSFGroup             string
	OTLPLogsEndpoint      string
	OTLPLogsHeaders       string
	OTLPLogsMaxCapture    string
	OTLPLogsGroup         string
	OTLPLogsTimeout       time.Duration
	BridgeRules           string

	ShowVersion bool // --version: print the version and exit
}

const usageHeader = `aep-gateway: a Kafka-backed, durable event gateway for the Agent Event Protocol.

With no --kafka-brokers it starts an embedded single-node Kafka-protocol broker
(kfake) whose data lives under --data-dir and survives restarts; its Kafka
address is printed at start-up so any Kafka tool can read the topics.
Every flag has an environment-variable twin, shown in brackets; the command
line wins over the environment.

Usage: aep-gateway [flags]

Flags:
`

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := newFlagSet("aep-gateway")
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHeader)
		fs.PrintDefaults()
	}
	defineFlags(fs, &c)
	return c, parseFlags(fs, &c, args)
}

// defineFlags defines every flag of the gateway on fs, bound to c.
func defineFlags(fs *flagSet, c *config) {
	fs.String(&c.Listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	fs.String(&c.TLSCertFile, "tls-cert-file", "", "serve HTTPS (HTTP/2 and HTTP/1.1) with this PEM certificate chain; reloaded, with --tls-key-file, when either changes (checked every --auth-reload-interval) and on SIGHUP")
	fs.String(&c.TLSKeyFile, "tls-key-file", "", "the PEM private key of --tls-cert-file")
	fs.String(&c.TLSClientCA, "tls-client-ca", "", "PEM CA certificates that client certificates are verified against (offered, not required); a verified certificate authenticates as the --api-keys line \"<tenant> cert:<subject CN>\"")
	fs.String(&c.AdminListen, "admin-listen", "", "admin listen address for /metrics, /readyz, /healthz and /debug/pprof/, which then leave the public listener (/healthz stays on both); empty: /metrics and /readyz on the public listener, no pprof")
	fs.String(&c.APIKeys, "api-keys", "", "API key file: lines of \"<tenant> sha256:<hex digest of the key> [principal=<id>] [scopes=<scope>,...]\" (no scopes: tenant-wide; docs/security.md, Principals and scopes); without it, a loopback listener runs in development mode (tenant \"default\", no authentication)")
	fs.String(&c.JWTSecretFile, "jwt-hs256-secret-file", "", "accept HS256 JWT bearer tokens signed with the secret in this file (32+ bytes); the tenant comes from --jwt-tenant-claim")
	fs.String(&c.JWTPublicKey, "jwt-public-key", "", "accept RS256 or ES256 JWT bearer tokens verified with this PEM public key")
	fs.String(&c.JWTTenantClaim, "jwt-tenant-claim", "tenant", "JWT claim that names the tenant")
	fs.String(&c.JWTIssuer, "jwt-issuer", "", "required JWT iss, when set")
	fs.String(&c.JWTAudience, "jwt-audience", "", "required JWT aud, when set")
	fs.Duration(&c.JWTLeeway, "jwt-leeway", 30*time.Second, "clock skew tolerated on JWT exp, nbf and iat (exp may lie at most 366 days ahead)")
	fs.String(&c.JWTJWKSURL, "jwt-jwks-url", "", "accept RS256/ES256 JWT bearer tokens verified with the key named by their kid in the JWKS at this URL (https; plain http only on a trusted network); refreshed every --jwt-jwks-refresh and, rate-limited, on an unknown kid")
	fs.String(&c.JWTJWKSFile, "jwt-jwks-file", "", "accept RS256/ES256 JWT bearer tokens verified with the key named by their kid in this JWKS file; reloaded when it changes and on SIGHUP")
	fs.Duration(&c.JWTJWKSRefresh, "jwt-jwks-refresh", 5*time.Minute, "how often --jwt-jwks-url is fetched again")
	fs.Duration(&c.AuthReloadInterval, "auth-reload-interval", 5*time.Second, "how often --api-keys and --jwt-jwks-file are checked for content changes (a SHA-256; new content takes effect once unchanged for 0.2s; SIGHUP reloads at once; 0: only on SIGHUP)")
	fs.String(&c.CursorKeys, "cursor-keys", "", "cursor signing key file: lines of \"<id 0-255> <hex secret, 32+ bytes>\", the first signs; every node of a deployment needs the same file (default: a key kept in --data-dir with the embedded broker, else a per-process random key)")
	fs.Bool(&c.Console, "console", false, "serve the web console at /console/ (behind the same authentication as the API; open it with ?access_token=KEY)")
	fs.Bool(&c.AllowUnauthenticated, "allow-unauthenticated", false, "allow development mode (no authentication) on a non-loopback listener; never in production")

	fs.String(&c.KafkaBrokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers; empty starts the embedded broker")
	fs.Bool(&c.KafkaTLS, "kafka-tls", false, "connect to Kafka over TLS")
	fs.String(&c.KafkaTLSCA, "kafka-tls-ca", "", "PEM file of CA certificates for Kafka TLS (default: system roots)")
	fs.String(&c.KafkaTLSCert, "kafka-tls-cert", "", "PEM client certificate for Kafka mutual TLS")
	fs.String(&c.KafkaTLSKey, "kafka-tls-key", "", "PEM client key for Kafka mutual TLS")
	fs.String(&c.KafkaTLSServerName, "kafka-tls-server-name", "", "override the TLS server name checked against broker certificates")
	fs.String(&c.KafkaSASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.String(&c.KafkaSASLUser, "kafka-sasl-user", "", "SASL user name")
	fs.String(&c.KafkaSASLPassword, "kafka-sasl-password", "", "SASL password (prefer the environment variable, or --kafka-sasl-password-file)")
	fs.String(&c.KafkaSASLPasswordFile, "kafka-sasl-password-file", "", "file holding the SASL password, read again at each authentication: a rotated password takes effect on the next connection without a restart")

	fs.String(&c.DataDir, "data-dir", "./data", "directory of the embedded broker's data")
	fs.String(&c.EmbeddedKafkaListen, "embedded-kafka-listen", "127.0.0.1:19092", "Kafka listen address of the embedded broker (loopback host; port 0 picks a free one)")
	fs.Bool(&c.EmbeddedSyncWrites, "embedded-sync-writes", false, "fsync every batch of the embedded broker (survives power loss, not just process crashes; slower)")

	fs.String(&c.TopicTemplate, "topic-template", partitioning.DefaultTopicTemplate, "events topic name of a tenant; {tenant} is replaced")
	fs.Int(&c.TopicPartitions, "topic-partitions", 12, "partitions of a new tenant topic")
	fs.Int(&c.TopicReplicationFactor, "topic-replication-factor", -1, "replication factor of new topics: tenant topics, the subscription journal, dialect R's presence and control topics (-1: the broker's default.replication.factor; forced to 1 on the embedded broker)")
	fs.Duration(&c.TopicRetention, "topic-retention", 7*24*time.Hour, "retention of a new tenant events topic: the replay window (-1ns: forever)")
	fs.Int64(&c.TopicRetentionBytes, "topic-retention-bytes", -1, "per-partition size bound of a new tenant events topic (0: unbounded; -1: unbounded on a Kafka cluster, 16 MiB on the embedded broker, whose restart memory grows with what it keeps: docs/operations.md)")
	fs.String(&c.TopicManagement, "topic-management", "create", "tenant topics: create (create missing ones, check existing ones), verify (never create: describe and check, for topics managed by Strimzi or Terraform; needs no CREATE ACL) or none (trust them as they are); docs/operations-kafka.md")
	fs.String(&c.KeyStrategy, "key-strategy", "session", "record key: session (session, else source) or binding (task > conversation > session > source, dialect D's Kafka binding)")

	fs.Int64(&c.MaxBodyBytes, "max-body-bytes", 8<<20, "largest ingest request body")
	fs.Int(&c.MaxEventBytes, "max-event-bytes", 512<<10, "largest single event")
	fs.Int(&c.MaxBatchEvents, "max-batch-events", 1000, "most events in one ingest request")
	fs.Bool(&c.ValidatePayloads, "validate-payloads", false, "check the data of dialect R events of registered AEP-0002 types against the specification's payload schemas and refuse a mismatch with 400 invalid-event naming the field (off: payloads are forwarded unchecked, as a relay does)")

	fs.Float64(&c.RateLimit, "rate-limit", 0, "events per second one tenant may ingest (token bucket; 0: unlimited); over it, 429 with the dialect's limit error and Retry-After")
	fs.Int(&c.RateBurst, "rate-burst", 0, "token bucket size of --rate-limit: the largest burst, and so the largest batch, a tenant may send (0: one second's worth)")
	fs.Int(&c.ReplayBuffer, "replay-buffer", 10000, "dialect R replay buffer, in events per session: a resume replays at most this many of the session's latest events the log holds (--topic-retention bounds it further); a position predating them gets replay-exhausted; advertised in discovery and hello; 0: no bound but retention (at most 100000)")
	fs.String(&c.ControlPolicy, "control-policy", "any", "who may send AEP-0004 commands on /socket, per tenant: RULE[;TENANT=RULE...], RULE any (every authenticated sender of the tenant), off, or agents:A|B (only commands whose agent is listed); commands never flow without authentication")
	fs.String(&c.NodeID, "node-id", "", "this node's name in the presence and control topics of dialect R and in durable stream claims (AEP-Stream-Node), unique among the running processes of the deployment; a restarted process may reuse its predecessor's, as the chart does with the pod name (empty: random per process)")
	fs.Int(&c.MaxDurablePerTenant, "max-durable-subscriptions-per-tenant", 1000, "live durable subscriptions (POST /aep/subscriptions) one tenant may hold in the cluster; past it a create is answered 429 subscription_rejected (0: unbounded)")
	fs.Duration(&c.AdHocGrace, "at-least-once-grace", time.Minute, "how long the subscription of an ad-hoc at_least_once stream (GET /aep/events?delivery_mode=at_least_once) outlives its last stream, for a resume with subscription_id on any node; it counts under --max-durable-subscriptions-per-tenant until then")
	fs.Bool(&c.ParkIdleStreams, "park-idle-streams", true, "hold idle SSE streams and WebSockets without a goroutine or net/http buffers (HTTP/1.x without TLS on Linux; docs/delivery.md, \"Parked SSE streams\"); false keeps a goroutine per stream")
	fs.Int(&c.MaxStreamsPerTenant, "max-streams-per-tenant", 1000, "open streams one tenant may hold on a node, every binding counted together: SSE streams, WebSocket connections and durable subscription streams of both dialects (0: unbounded)")
	fs.Int(&c.MaxConnections, "max-connections", 8192, "HTTP connections open at once, all clients together; past it a new connection gets 503 and is closed (0: unbounded; keep it below the process's file descriptor limit)")
	fs.Int(&c.MaxConnectionsPerIP, "max-connections-per-ip", 512, "HTTP connections open at once from one client IP address (IPv6: one /64); past it a new connection gets 503 and is closed (0: unbounded; behind an Ingress or load balancer, list its addresses in --trusted-proxies)")
	fs.String(&c.TrustedProxies, "trusted-proxies", "", "comma-separated addresses or CIDR prefixes of proxies in front of the gateway (an Ingress controller, a load balancer): their connections count toward --max-connections but not --max-connections-per-ip, since many clients arrive through each")
	fs.Duration(&c.IdleTimeout, "idle-timeout", 30*time.Second, "how long an idle keep-alive HTTP connection is kept open")
	fs.Duration(&c.ReadTimeout, "read-timeout", 60*time.Second, "how long a request body (ingest, subscriptions, acks) may take to arrive; past it the read fails (ingest answers 408) and the connection is closed (0: no bound)")
	fs.Int64(&c.MaxInflightBytesPerTenant, "max-inflight-bytes-per-tenant", 64<<20, "ingest request body bytes one tenant may have in flight on a node; past it 429 with the dialect's limit error (0: unbounded)")
	fs.String(&c.CORSAllowedOrigins, "cors-allowed-origins", "", "comma-separated browser origins allowed to call the HTTP routes and open WebSockets: exact origins (https://app.example.com) or host patterns (https://*.example.com); empty: no cross-origin access")
	fs.Duration(&c.WriteTimeout, "write-timeout", 30*time.Second, "how long an ingest request may take in all (tenant topic creation included), and how long the producer keeps trying an event whose request was answered before Kafka acknowledged it")
	fs.Duration(&c.ProduceTimeout, "produce-timeout", gateway.DefaultProduceTimeout, "how long an ingest request waits for Kafka to acknowledge its events; past it the answer is 503 \"may or may not be in the log\" (retry with the same ids: the idempotency window answers a retry with the first write's position)")
	fs.Int64(&c.MemoryBudget, "memory-budget", engine.DefaultMemoryBudget, "bytes (decoded) of events that catching-up streams (replays, resumes, slow lossless subscribers) may hold queued on this node; past it they wait for their clients to read (-1: no bound; docs/security.md)")
	fs.Int64(&c.TenantBudget, "tenant-memory-budget", engine.DefaultTenantMemoryBudget, "the same bound for each tenant's streams, so that one tenant cannot take the node's budget (-1: no bound)")
	fs.Int64(&c.CatchUpRate, "catchup-rate", engine.DefaultCatchUpRate, "bytes (decoded) per second that catching-up streams may read on this node in all (-1: unpaced; docs/security.md)")
	fs.Int64(&c.TenantCatchUp, "tenant-catchup-rate", engine.DefaultTenantCatchUpRate, "bytes (decoded) per second that one tenant's catching-up streams may read together, so that one tenant's replays leave the broker time for the others' ingest (-1: unpaced)")
	fs.Duration(&c.PartitionCheck, "partition-check", engine.DefaultPartitionCheck, "how often each node's readers of a tenant topic (live tails, durable streams) look for partitions an operator added; they read them from their start (0: never)")
	fs.Duration(&c.DedupWindow, "dedup-window", dedup.DefaultTTL, "how long a node remembers an ingested event identity (tenant, source, id), to answer a retry with the first write's position instead of writing it again")
	fs.Int(&c.DedupMaxEvents, "dedup-max-events", dedup.DefaultMax, "how many ingested event identities a node remembers at most (the oldest go first; 0: the default; -1: no idempotency window)")
	fs.Duration(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for in-flight requests")
	fs.Duration(&c.DrainDelay, "drain-delay", 0, "on SIGTERM, keep serving this long with /readyz answering 503 (draining) before the listener closes, so that load balancers see the node leave before its connections are refused; then streams are told to resume elsewhere and in-flight requests get --shutdown-timeout (0: close at once)")
	fs.String(&c.LogFormat, "log-format", "json", "log format: json or console (human-readable)")
	fs.String(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.Int(&c.AccessLogSample, "access-log-sample", 1, "write one info-level access log line (request id, tenant, remote, route, status, bytes, latency) in every N requests; server errors are always written (0: none but server errors)")
	fs.String(&c.OTLPEndpoint, "otlp-endpoint", "", "send OpenTelemetry traces to this OTLP/HTTP collector (http://collector:4318; /v1/traces is appended when the URL has no path); empty: the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT when set, else tracing is off")
	fs.String(&c.OTelServiceName, "otel-service-name", envOr("OTEL_SERVICE_NAME", "aep-gateway"), "service.name of the traces (default: OTEL_SERVICE_NAME when set)")
	fs.Float64(&c.TraceSampleRatio, "trace-sample-ratio", 1, "fraction of new traces recorded, 0..1; a request or event with a traceparent follows its sampled flag")
	fs.Int(&c.MetricsMaxTenants, "metrics-max-tenants", 100, "tenants that get their own series in per-tenant metrics (lag, redeliveries, dead letters); later tenants are counted under tenant=\"_other\"")
	fs.String(&c.Role, "role", "gateway", "what this process runs: gateway (the HTTP gateway), filter-worker (only a filter worker of --live-delivery workers: reads the tenant topics in the consumer group --filter-worker-group and forwards matches to the nodes; serves /metrics, /healthz and /readyz on --listen), sealer (only the audit sealer, --audit-seal; same endpoints), bridge (only the bridges turned on: --cloudevents-bridge, --ocsf-bridge, --otlp-logs-endpoint; same endpoints), or all (gateway and filter worker in one process)")
	fs.String(&c.AuditSeal, "audit-seal", "auto", "run the audit sealer in this process (docs/audit.md): on, off, or auto (on with the embedded broker, off with --kafka-brokers, where a --role sealer deployment does it); it seals every tenant topic into signed checkpoints on <events topic>.audit")
	fs.String(&c.AuditSigningKey, "audit-signing-key", "", "PEM PKCS #8 Ed25519 private key that signs the audit checkpoints (openssl genpkey -algorithm ed25519); required to seal on a real cluster; empty with the embedded broker: <data-dir>/audit-signing.key, created on first start")
	fs.String(&c.AuditPublicKeys, "audit-public-keys", "", "PEM PUBLIC KEY blocks of earlier signing keys, published beside the active one at /.well-known/aep-audit-keys so checkpoints they signed still verify after a rotation")
	fs.Duration(&c.AuditInterval, "audit-checkpoint-interval", 5*time.Second, "how often the sealer checkpoints records sealed since the last checkpoint (it also checkpoints every 1024 records)")
	fs.String(&c.AuditGroup, "audit-sealer-group", sealer.DefaultGroup, "consumer group of the audit sealers")
	fs.Bool(&c.TaskStates, "task-states", true, "enforce dialect D's task lifecycle (task-lifecycle.md, AEP-C1): a worker in this process (one consumer group over every node) judges each tenant's task events in log order and answers an illegal transition with an event.rejected right after it in the log (docs/dialects.md, \"Task states\"); not in --role filter-worker, sealer or bridge")
	fs.String(&c.TaskStatesGroup, "task-states-group", "aep-task-states", "consumer group of the task-state workers")
	fs.Bool(&c.CloudEventsBridge, "cloudevents-bridge", false, "run the CloudEvents bridge in this process (--role bridge runs only bridges): every dialect R event of every tenant, as its CloudEvent (AEP-0005 §1, structured mode), exactly once into <events topic>.cloudevents, partition for partition (docs/analytics.md)")
	fs.String(&c.CloudEventsMaxCapture, "cloudevents-max-capture", "metadata", "capture ceiling of the CloudEvents bridge: events above it are down-levelled before they are written (none, metadata, redacted, full)")
	fs.String(&c.CloudEventsGroup, "cloudevents-bridge-group", bridge.DefaultCloudEventsGroup, "consumer group of the CloudEvents bridges (and the prefix of their transactional ids, with --node-id)")
	fs.String(&c.CloudEventsMode, "cloudevents-mode", "structured", "the CloudEvents Kafka binding mode the bridge writes: structured (the value is the CloudEvent JSON) or binary (attributes in ce_ headers, the value the data alone)")
	fs.Bool(&c.OCSFBridge, "ocsf-bridge", false, "run the OCSF bridge in this process (--role bridge runs only bridges): the security-relevant dialect R families (sessions, tools, attention; AEP-0005 §4) as OCSF 1.8.0 records, exactly once into <events topic>.ocsf, partition for partition (docs/analytics.md)")
	fs.String(&c.OCSFMaxCapture, "ocsf-max-capture", "metadata", "capture ceiling of the OCSF bridge (none, metadata, redacted, full)")
	fs.String(&c.OCSFGroup, "ocsf-bridge-group", bridge.DefaultOCSFGroup, "consumer group of the OCSF bridges (and the prefix of their transactional ids, with --node-id)")
	fs.String(&c.OTLPLogsEndpoint, "otlp-logs-endpoint", "", "run the OTLP logs bridge in this process: every dialect R event as an OTLP LogRecord (AEP-0005 §3), exported over OTLP/HTTP (JSON) to this URL (e.g. http://collector:4318/v1/logs), at least once: offsets are committed after the collector accepted, failures retried with backoff (docs/analytics.md)")
	fs.String(&c.OTLPLogsHeaders, "otlp-logs-headers", "", "headers sent with every OTLP logs export, comma-separated key=value (e.g. authorization=Bearer%20t; values URL-decoded)")
	fs.String(&c.OTLPLogsMaxCapture, "otlp-logs-max-capture", "metadata", "capture ceiling of the OTLP logs bridge (none, metadata, redacted, full); AEP-0005 §3.3's default")
	fs.String(&c.OTLPLogsGroup, "otlp-logs-group", bridge.DefaultOTLPGroup, "consumer group of the OTLP logs bridges")
	fs.Duration(&c.OTLPLogsTimeout, "otlp-logs-timeout", 10*time.Second, "bound on one OTLP logs export attempt (a timed-out attempt is retried: the collector may then hold its records twice)")
	fs.String(&c.BridgeRules, "bridge-rules", "", "JSON file of per-tenant bridge rules: a dialect R filter, a lower capture ceiling, or off, per tenant (\"*\": the others) and bridge (docs/analytics.md); read at start")
	fs.String(&c.LiveDelivery, "live-delivery", "tail", "how live (best_effort/replayable) events reach this node: tail (a Kafka reader per tenant topic on every node that streams it) or workers (filter workers forward each match once per node to its partition of --live-delivery-topic); every node of a cluster must use the same mode, and workers needs filter workers running (docs/scaling.md)")
	fs.String(&c.LiveRegistryTopic, "live-registry-topic", forward.DefaultRegistryTopic, "--live-delivery workers: compacted topic (one partition) where nodes register their live subscriptions for the filter workers")
	fs.String(&c.LiveDeliveryTopic, "live-delivery-topic", forward.DefaultDeliveryTopic, "--live-delivery workers: topic the filter workers forward matches to, one partition per node (by hash of --node-id)")
	fs.Int(&c.LiveDeliveryPartitions, "live-delivery-partitions", 12, "partitions of --live-delivery-topic when it is created (nodes hash onto them; size it near the node count)")
	fs.String(&c.FilterWorkerGroup, "filter-worker-group", filterworker.DefaultGroup, "consumer group of the filter workers (--role filter-worker or all)")
	fs.Int(&c.MetricsSubscriptionLagTop, "metrics-subscription-lag-top", 10, "export aep_delivery_subscription_lag_records for the N durable subscriptions of this node with the largest lag (0: none)")
	// No environment twin: an AEP_VERSION meant for something else must not
	// turn the server into a version printer.
	fs.FlagSet.BoolVar(&c.ShowVersion, "version", false, "print the version, VCS revision and Go version, and exit")
}

// parseFlags parses args into c (flags defined by defineFlags) and checks
// the result.
func parseFlags(fs *flagSet, c *config, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.UnknownEnv = fs.unknownEnv(os.Environ())
	if len(fs.envErrs) > 0 {
		return errors.Join(fs.envErrs...)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return c.validate()
}

func (c config) validate() error {
	if _, err := c.trustedProxies(); err != nil {
		return err
	}
	if c.AdHocGrace < time.Second || c.AdHocGrace > 24*time.Hour {
		return fmt.Errorf("--at-least-once-grace %v: want 1s to 24h", c.AdHocGrace)
	}
	if c.DrainDelay < 0 || c.DrainDelay > 10*time.Minute {
		return fmt.Errorf("--drain-delay %v: want 0 to 10m", c.DrainDelay)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if c.TLSClientCA != "" && c.TLSCertFile == "" {
		return errors.New("--tls-client-ca needs --tls-cert-file")
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			return fmt.Errorf("--admin-listen %q: %w", c.AdminListen, err)
		}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if c.embedded() {
		host, _, err := net.SplitHostPort(c.EmbeddedKafkaListen)
		if err != nil {
			return fmt.Errorf("--embedded-kafka-listen %q: %w", c.EmbeddedKafkaListen, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("--embedded-kafka-listen %q: the embedded broker only listens on loopback", c.EmbeddedKafkaListen)
		}
		if c.DataDir == "" {
			return errors.New("--data-dir is required with the embedded broker")
		}
	}
	switch strings.ToUpper(c.KafkaSASLMechanism) {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return fmt.Errorf("--kafka-sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.KafkaSASLMechanism)
	}
	if c.KafkaSASLMechanism != "" && c.KafkaSASLUser == "" {
		return errors.New("--kafka-sasl-user is required with --kafka-sasl-mechanism")
	}
	if (c.KafkaTLSCert == "") != (c.KafkaTLSKey == "") {
		return errors.New("--kafka-tls-cert and --kafka-tls-key go together")
	}
	if _, err := partitioning.ParseKeyStrategy(c.KeyStrategy); err != nil {
		return err
	}
	if err := (partitioning.Naming{Template: c.TopicTemplate}).Validate(); err != nil {
		return err
	}
	if c.TopicRetentionBytes < -1 {
		return fmt.Errorf("--topic-retention-bytes %d: want -1, 0 or a size", c.TopicRetentionBytes)
	}
	if _, err := partitioning.ParseTopicManagement(c.TopicManagement); err != nil {
		return fmt.Errorf("--topic-management: %w", err)
	}
	if c.TopicPartitions < 1 || c.TopicPartitions > 10000 {
		return fmt.Errorf("--topic-partitions %d: want 1..10000", c.TopicPartitions)
	}
	if c.MaxEventBytes < 1024 || int64(c.MaxEventBytes) > c.MaxBodyBytes {
		return fmt.Errorf("--max-event-bytes %d: want at least 1024 and at most --max-body-bytes", c.MaxEventBytes)
	}
	if c.RateLimit < 0 || c.RateBurst < 0 {
		return errors.New("--rate-limit and --rate-burst must not be negative")
	}
	if c.TraceSampleRatio < 0 || c.TraceSampleRatio > 1 {
		return fmt.Errorf("--trace-sample-ratio %v: want 0..1", c.TraceSampleRatio)
	}
	if c.MetricsMaxTenants < 1 || c.MetricsMaxTenants > 10000 {
		return fmt.Errorf("--metrics-max-tenants %d: want 1..10000", c.MetricsMaxTenants)
	}
	if c.Role != roleGateway && c.Role != roleWorker && c.Role != roleSealer && c.Role != roleBridge && c.Role != roleAll {
		return fmt.Errorf("--role %q: want gateway, filter-worker, sealer, bridge or all", c.Role)
	}
	for flag, v := range map[string]string{"cloudevents-max-capture": c.CloudEventsMaxCapture, "ocsf-max-capture": c.OCSFMaxCapture, "otlp-logs-max-capture": c.OTLPLogsMaxCapture} {
		if _, ok := aep.ParseCapture(v); !ok {
			return fmt.Errorf("--%s %q: want none, metadata, redacted or full", flag, v)
		}
	}
	if c.CloudEventsMode != "structured" && c.CloudEventsMode != "binary" {
		return fmt.Errorf("--cloudevents-mode %q: want structured or binary", c.CloudEventsMode)
	}
	if c.OTLPLogsEndpoint != "" {
		if u, err := url.Parse(c.OTLPLogsEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--otlp-logs-endpoint %q: want an http or https URL", c.OTLPLogsEndpoint)
		}
	}
	if _, err := parseHeaderList(c.OTLPLogsHeaders); err != nil {
		return fmt.Errorf("--otlp-logs-headers: %w", err)
	}
	if c.OTLPLogsTimeout <= 0 {
		return errors.New("--otlp-logs-timeout must be positive")
	}
	if c.Role == roleBridge && !c.CloudEventsBridge && !c.OCSFBridge && c.OTLPLogsEndpoint == "" {
		return errors.New("--role bridge runs the bridges turned on: give --cloudevents-bridge, --ocsf-bridge or --otlp-logs-endpoint")
	}
	if _, err := bridge.LoadRules(c.BridgeRules); err != nil {
		return err
	}
	if c.AuditSeal != "auto" && c.AuditSeal != "on" && c.AuditSeal != "off" {
		return fmt.Errorf("--audit-seal %q: want auto, on or off", c.AuditSeal)
	}
	if c.AuditInterval < 10*time.Millisecond || c.AuditInterval > time.Hour {
		return fmt.Errorf("--audit-checkpoint-interval %v: want 10ms..1h", c.AuditInterval)
	}
	if c.sealHere() && !c.embedded() && c.AuditSigningKey == "" {
		return errors.New("--audit-signing-key is required to seal on a real cluster (--audit-seal on or --role sealer)")
	}
	if _, err := engine.ParseLiveDelivery(c.LiveDelivery); err != nil {
		return fmt.Errorf("--live-delivery %q: want tail or workers", c.LiveDelivery)
	}
	if c.LiveDeliveryPartitions < 1 || c.LiveDeliveryPartitions > 10000 {
		return fmt.Errorf("--live-delivery-partitions %d: want 1..10000", c.LiveDeliveryPartitions)
	}
	if c.MetricsSubscriptionLagTop < 0 || c.MetricsSubscriptionLagTop > 1000 {
		return fmt.Errorf("--metrics-subscription-lag-top %d: want 0..1000", c.MetricsSubscriptionLagTop)
	}
	if c.AccessLogSample < 0 {
		return fmt.Errorf("--access-log-sample %d: want 0 or more", c.AccessLogSample)
	}
	if c.ReplayBuffer < 0 || c.ReplayBuffer > 100000 {
		return fmt.Errorf("--replay-buffer %d: want 0..100000", c.ReplayBuffer)
	}
	if _, err := dialectr.ParseControlPolicy(c.ControlPolicy); err != nil {
		return fmt.Errorf("--control-policy: %w", err)
	}
	if c.MaxBatchEvents < 1 {
		return fmt.Errorf("--max-batch-events %d: want at least 1", c.MaxBatchEvents)
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		return fmt.Errorf("--log-format %q: want json or console", c.LogFormat)
	}
	if n := countSet(c.JWTSecretFile, c.JWTPublicKey, c.JWTJWKSURL, c.JWTJWKSFile); n > 1 {
		return errors.New("--jwt-hs256-secret-file, --jwt-public-key, --jwt-jwks-url and --jwt-jwks-file exclude each other")
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if c.dev() && !c.AllowUnauthenticated && !loopback(c.Listen) {
		return fmt.Errorf("--listen %s is not a loopback address: give --api-keys or a JWT key, or --allow-unauthenticated to run open (development only)", c.Listen)
	}
	return nil
}

// dev reports development mode: no way to authenticate anybody.
func (c config) dev() bool {
	return c.APIKeys == "" && countSet(c.JWTSecretFile, c.JWTPublicKey, c.JWTJWKSURL, c.JWTJWKSFile) == 0
}

// accessLogSampleN is gateway.Config.AccessLogSampleN: 0 (server errors
// only) becomes a sample no counter reaches.
func (c config) accessLogSampleN() int {
	if c.AccessLogSample == 0 {
		return math.MaxInt
	}
	return c.AccessLogSample
}

func (c config) embedded() bool { return strings.TrimSpace(c.KafkaBrokers) == "" }

func (c config) brokers() []string {
	var out []string
	for _, b := range strings.Split(c.KafkaBrokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// envOr is the environment variable name's value, or def when it is unset
// or empty (a default taken from a standard variable of another tool).
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// otlpEndpoint is --otlp-endpoint, else the standard OpenTelemetry
// environment variables' endpoint.
func (c config) otlpEndpoint() string {
	if c.OTLPEndpoint != "" {
		return c.OTLPEndpoint
	}
	return tracing.EnvEndpoint(os.Getenv)
}

// trustedProxies parses --trusted-proxies: addresses (a /32 or /128) and
// CIDR prefixes.
func (c config) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(c.TrustedProxies, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxies %q: want an IP address or a CIDR prefix", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// partitionCheck is --partition-check for the engine and the durable
// cluster, whose zero means their default: 0 (never) becomes negative.
func (c config) partitionCheck() time.Duration {
	if c.PartitionCheck <= 0 {
		return -1
	}
	return c.PartitionCheck
}
