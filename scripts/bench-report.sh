#!/usr/bin/env bash
# make bench-report: every comparative benchmark of issue 13 in one run, then
# docs/benchmarks.md's generated section and charts (cmd/benchreport).
# Knobs (environment): KAFKA_BROKERS (127.0.0.1:9092), KAFKA_PID (the broker's
# process, for its CPU time per event; found with pgrep when unset),
# BENCH_DURATION (10s, each
# measured phase), BENCH_SUBS (100,1000: the batched fan-out case),
# BENCH_FANOUT_SINGLE_SUBS (1,10,100,1000: fan-out with one event a publish),
# BENCH_FANOUT_DURATION (5s, each single-event fan-out window),
# BENCH_FANOUT_TRANSPORTS (sse: of the single-event and embedded-broker
# fan-out cases; the batched case runs sse and ws), BENCH_RATES (250,500,1000,2000),
# BENCH_IDLE (10000 connections), BENCH_RESUME (1: run the resume Go benchmark,
# 0: skip), BENCH_OUT (.bench), CENTRIFUGO (a Centrifugo v6 binary; default:
# go install github.com/centrifugal/centrifugo/v6@v6.9.1 when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
BENCH_DURATION=${BENCH_DURATION:-10s}
BENCH_SUBS=${BENCH_SUBS:-100,1000}
BENCH_FANOUT_SINGLE_SUBS=${BENCH_FANOUT_SINGLE_SUBS:-1,10,100,1000}
BENCH_FANOUT_DURATION=${BENCH_FANOUT_DURATION:-5s}
BENCH_FANOUT_TRANSPORTS=${BENCH_FANOUT_TRANSPORTS:-sse}
BENCH_RATES=${BENCH_RATES:-250,500,1000,2000}
BENCH_IDLE=${BENCH_IDLE:-10000}
BENCH_RESUME=${BENCH_RESUME:-1}
BENCH_OUT=${BENCH_OUT:-.bench}
GO=${GO:-go}

say() { echo "$(date -u +%H:%M:%S)  bench-report: $*" >&2; }

mkdir -p bin "$BENCH_OUT"
say "building bin/aepbench, bin/aep-gateway, bin/benchreport"
$GO build -o bin/ ./cmd/aepbench ./cmd/aep-gateway ./cmd/benchreport
if [ -z "${CENTRIFUGO:-}" ]; then
  CENTRIFUGO=$(command -v centrifugo || true)
  [ -n "$CENTRIFUGO" ] || CENTRIFUGO="$($GO env GOPATH)/bin/centrifugo"
  if [ ! -x "$CENTRIFUGO" ]; then
    say "installing Centrifugo v6.9.1 (go install)"
    $GO install github.com/centrifugal/centrifugo/v6@v6.9.1
  fi
fi

run=rep$(date +%s)
prefix="aepctl.bench.$run."
cleanup() {
  [ -n "${gw_pid:-}" ] && kill "$gw_pid" 2>/dev/null && wait "$gw_pid" 2>/dev/null || true
  bin/aepbench cleanup --kafka-brokers "$KAFKA_BROKERS" --prefix "$prefix" || true
}
trap cleanup EXIT

cat >"$BENCH_OUT/meta.json" <<JSON
{"commit":"$(git rev-parse --short=12 HEAD)$(git diff --quiet || echo '+dirty')","date":"$(date -u +%Y-%m-%dT%H:%MZ)",
 "machine":"$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load average at start $(cut -d' ' -f1-3 /proc/loadavg)",
 "kafka":"Apache Kafka at $KAFKA_BROKERS",
 "knobs":{"BENCH_DURATION":"$BENCH_DURATION","BENCH_SUBS":"$BENCH_SUBS","BENCH_FANOUT_SINGLE_SUBS":"$BENCH_FANOUT_SINGLE_SUBS","BENCH_FANOUT_DURATION":"$BENCH_FANOUT_DURATION","BENCH_FANOUT_TRANSPORTS":"$BENCH_FANOUT_TRANSPORTS","BENCH_RATES":"$BENCH_RATES","BENCH_IDLE":"$BENCH_IDLE"}}
JSON

# Ingest: one gateway on the real Kafka, three shapes, each beside franz-go;
# then one gateway on its embedded broker, the same shapes, the baseline
# producing to that same embedded broker. Each run also reports the CPU time
# per event of aepbench, the gateway and (real Kafka) the broker.
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])' 2>/dev/null || echo "$1"; }
KAFKA_PID=${KAFKA_PID:-$(pgrep -f 'kafka\.Kafka' | head -1 || true)}
ingest_runs() { # $1: file prefix, $2: baseline brokers, $3...: extra bench flags
  local name=$1 brokers=$2
  shift 2
  say "ingest ($name): warm-up (creates the topics, fills the metadata caches; not reported)"
  bin/aepbench ingest --url "http://127.0.0.1:$port" --max --duration 2s --batch 10 --concurrency 2 \
    --baseline-kafka "$brokers" --baseline-topic "${prefix}baseline" >/dev/null
  for shape in "100 8" "1000 8" "1 64"; do
    set -- $shape "$@"
    local b=$1 c=$2
    shift 2
    say "ingest ($name): batch $b, concurrency $c, $BENCH_DURATION per phase"
    bin/aepbench ingest --url "http://127.0.0.1:$port" --max --duration "$BENCH_DURATION" --batch "$b" --concurrency "$c" \
      --baseline-kafka "$brokers" --baseline-topic "${prefix}baseline" --baseline-routed --baseline-http --gateway-pid "$gw_pid" "$@" \
      --output json --progress >"$BENCH_OUT/ingest-$name$b.json"
  done
}
# WebSocket emitters (real Kafka): one event a message, each answered before
# the next, and 16 sent between answers (D's acks, R's pong after a ping);
# the baseline produces the same batches.
ws_ingest_runs() { # $1: baseline brokers, $2...: extra bench flags
  local brokers=$1
  shift
  for shape in "D 1" "R 1" "D 16" "R 16"; do
    set -- $shape "$@"
    local d=$1 b=$2
    shift 2
    say "ingest (WebSocket): dialect $d, $b events between answers, 8 connections, $BENCH_DURATION per phase"
    bin/aepbench ingest --url "http://127.0.0.1:$port" --max --duration "$BENCH_DURATION" --batch "$b" --concurrency 8 \
      --transport ws --dialect "$d" --baseline-kafka "$brokers" --baseline-topic "${prefix}baseline" --baseline-routed \
      --gateway-pid "$gw_pid" "$@" --output json --progress >"$BENCH_OUT/ingest-ws-${d,,}-$b.json"
  done
}
wait_healthy() {
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return 0; sleep 0.2; done
  say "the gateway did not become healthy; see its log in $BENCH_OUT"
  return 1
}

port=$(free_port 18480)
bin/aep-gateway --listen "127.0.0.1:$port" --kafka-brokers "$KAFKA_BROKERS" --topic-replication-factor -1 \
  --topic-template "${prefix}{tenant}.events" --topic-retention 1h --log-level warn --access-log-sample 0 \
  --max-connections 0 --max-connections-per-ip 0 >"$BENCH_OUT/ingest-gateway.log" 2>&1 &
gw_pid=$!
wait_healthy
broker_flags=()
[ -n "$KAFKA_PID" ] && broker_flags=(--broker-pid "$KAFKA_PID")
ingest_runs "" "$KAFKA_BROKERS" "${broker_flags[@]}"
ws_ingest_runs "$KAFKA_BROKERS" "${broker_flags[@]}"
kill "$gw_pid"; wait "$gw_pid" 2>/dev/null || true; gw_pid=

port=$(free_port 18481)
kport=$(free_port 18482)
emb_dir=$(mktemp -d)
bin/aep-gateway --listen "127.0.0.1:$port" --data-dir "$emb_dir" --embedded-kafka-listen "127.0.0.1:$kport" \
  --log-level warn --access-log-sample 0 --max-connections 0 --max-connections-per-ip 0 \
  >"$BENCH_OUT/ingest-gateway-embedded.log" 2>&1 &
gw_pid=$!
wait_healthy
ingest_runs "emb-" "127.0.0.1:$kport"
kill "$gw_pid"; wait "$gw_pid" 2>/dev/null || true; gw_pid=
rm -rf "$emb_dir"

# Fan-out, three shapes, each gateway run beside Centrifugo in the same
# command: single-event publishes (8 in flight, what most publishers send)
# on the real Kafka; batched (100 events a request) on the real Kafka; and
# single-event on the gateway's embedded broker. With the real Kafka the
# broker's CPU (--broker-pid) gives the whole-system figure.
say "fan-out: one event a publish, 8 publishers, subscribers $BENCH_FANOUT_SINGLE_SUBS, $BENCH_FANOUT_TRANSPORTS, real Kafka"
bin/aepbench fanout --gateway-bin bin/aep-gateway --kafka-brokers "$KAFKA_BROKERS" "${broker_flags[@]}" --centrifugo-bin "$CENTRIFUGO" \
  --batch 1 --publishers 8 --subscribers "$BENCH_FANOUT_SINGLE_SUBS" --transports "$BENCH_FANOUT_TRANSPORTS" \
  --duration "$BENCH_FANOUT_DURATION" --output json --progress >"$BENCH_OUT/fanout-single.json" ||
  say "fan-out (single): some runs failed (listed in fanout-single.json); the report shows the others"

say "fan-out: 100 events a publish, subscribers $BENCH_SUBS, SSE and WebSocket, real Kafka"
bin/aepbench fanout --gateway-bin bin/aep-gateway --kafka-brokers "$KAFKA_BROKERS" "${broker_flags[@]}" --centrifugo-bin "$CENTRIFUGO" \
  --batch 100 --subscribers "$BENCH_SUBS" --duration "$BENCH_DURATION" --output json --progress >"$BENCH_OUT/fanout.json" ||
  say "fan-out: some runs failed (listed in fanout.json); the report shows the others"

say "fan-out: one event a publish, 8 publishers, 100 subscribers, $BENCH_FANOUT_TRANSPORTS, embedded broker"
bin/aepbench fanout --gateway-bin bin/aep-gateway --kafka-brokers "" --centrifugo-bin "$CENTRIFUGO" \
  --batch 1 --publishers 8 --subscribers 100 --transports "$BENCH_FANOUT_TRANSPORTS" \
  --duration "$BENCH_FANOUT_DURATION" --output json --progress >"$BENCH_OUT/fanout-emb.json" ||
  say "fan-out (embedded): some runs failed (listed in fanout-emb.json); the report shows the others"

say "latency: rates $BENCH_RATES, gateway vs direct"
bin/aepbench latency --gateway-bin bin/aep-gateway --kafka-brokers "$KAFKA_BROKERS" \
  --rates "$BENCH_RATES" --duration "$BENCH_DURATION" --output json --progress >"$BENCH_OUT/latency.json"

say "idle: $BENCH_IDLE connections, SSE and WebSocket, gateway vs Centrifugo"
bin/aepbench idle --gateway-bin bin/aep-gateway --kafka-brokers "$KAFKA_BROKERS" --centrifugo-bin "$CENTRIFUGO" \
  --connections "$BENCH_IDLE" --output json --progress >"$BENCH_OUT/idle.json"

if [ "$BENCH_RESUME" = 1 ]; then
  say "resume: BenchmarkSSEResumePartitionSize (1M vs 10k events per partition, embedded broker)"
  $GO test -run '^$' -bench 'BenchmarkSSEResumePartitionSize' -benchtime 82x -timeout 30m ./gateway/dialectr/ >"$BENCH_OUT/resume.txt"
fi

say "writing docs/benchmarks.md and docs/images/bench-*.svg"
bin/benchreport --in "$BENCH_OUT" --doc docs/benchmarks.md --images docs/images
say "done"
