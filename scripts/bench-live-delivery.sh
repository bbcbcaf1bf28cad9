#!/usr/bin/env bash
# Kafka clients, Kafka fetch traffic and CPU per gateway node in both
# --live-delivery modes, in one run on one Kafka (docs/scaling.md):
# 2 nodes, TENANTS tenants, one SSE stream per tenant on each node, EVENTS
# events per tenant published on node a. Prints one line per process.
# Node ids node-a and node-b hash to different partitions of the 4-partition
# delivery topic (nodes sharing one read each other's records too).
# Needs a Kafka at KAFKA_BROKERS (default 127.0.0.1:9092), curl and ss.
set -euo pipefail
cd "$(dirname "$0")/.."
BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
TENANTS=${TENANTS:-20}
EVENTS=${EVENTS:-2000}
BIN=${BIN:-$(mktemp -d)/aep-gateway}
go build -o "$BIN" ./cmd/aep-gateway
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
for i in $(seq -w 1 "$TENANTS"); do
	k="bench-key-t$i-0123456789abcdef0123456789"
	echo "t$i sha256:$(printf %s "$k" | sha256sum | cut -d' ' -f1)" >>"$dir/keys"
done
key() { echo "bench-key-t$1-0123456789abcdef0123456789"; }
for n in $(seq 0 499); do
	printf '{"aep_version":"0.1","id":"evt_b_%06d","type":"task.progress","source":"agent:bench","session_id":"s%d","created_at":"2026-07-09T10:00:00Z","payload":{"i":%d}}\n' "$n" $((n % 7)) "$n"
done >"$dir/batch.ndjson"

cpu() { awk '{print $14+$15}' "/proc/$1/stat"; } # clock ticks
conns() { ss -tnp 2>/dev/null | grep "pid=$1," | grep -c ":${BROKERS##*:} " || true; }
fetched() { # bytes fetched by the process's Kafka clients (kprom)
	curl -s "http://127.0.0.1:$1/metrics" | awk '/^aep_kafka_fetch_uncompressed_bytes_total/ {s+=$2} END {printf "%d", s}'
}
start() { # port args...
	local port=$1
	shift
	"$BIN" --listen "127.0.0.1:$port" --log-level warn "$@" 2>>"$dir/log" &
	echo $! >"$dir/pid.$port"
	for _ in $(seq 1 300); do
		curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return 0
		sleep 0.1
	done
	echo "port $port never ready" >&2
	tail -20 "$dir/log" >&2
	exit 1
}

run() { # mode
	local mode=$1 prefix="bench-$1-$RANDOM"
	local common=(--kafka-brokers "$BROKERS" --api-keys "$dir/keys" --topic-template "$prefix.{tenant}.events"
		--topic-partitions 3 --topic-replication-factor 1 --live-delivery "$mode"
		--live-registry-topic "$prefix.registry" --live-delivery-topic "$prefix.delivery"
		--live-delivery-partitions 4 --filter-worker-group "$prefix-w"
		--dedup-max-events -1) # the same batch (same ids) is posted again and again: no idempotency window
	local ports=(18181 18182)
	[ "$mode" = workers ] && start 18183 --role filter-worker "${common[@]}"
	start 18181 --node-id node-a "${common[@]}"
	start 18182 --node-id node-b "${common[@]}"
	for port in "${ports[@]}"; do
		for i in $(seq -w 1 "$TENANTS"); do
			curl -sN -H "Authorization: Bearer $(key "$i")" "http://127.0.0.1:$port/aep/events?types=*&delivery_mode=replayable" >"$dir/$mode.$port.$i.sse" &
			echo $! >>"$dir/curls.$mode"
		done
	done
	# Every stream must be open before the first event is published: a stream
	# without a cursor starts at the end of the log, so one that subscribed
	# after a batch would never see it (a fixed sleep lost one batch once).
	local open=0
	for _ in $(seq 1 600); do
		open=$(cat "$dir/$mode".*.sse 2>/dev/null | grep -c '^: stream open' || true)
		[ "$open" -ge $((${#ports[@]} * 10#$TENANTS)) ] && break
		sleep 0.1
	done
	if [ "$open" -lt $((${#ports[@]} * 10#$TENANTS)) ]; then
		echo "only $open streams opened" >&2
		exit 1
	fi
	if [ "$mode" = workers ]; then
		# The worker's group finds the new tenant topics (metadata, <= 10 s) and
		# answers every registration with a marker per partition.
		for _ in $(seq 1 600); do
			m=$(curl -s http://127.0.0.1:18183/metrics | awk '/^aep_filterworker_markers_total/ {print $2}')
			[ "${m%.*}" -ge $((2 * TENANTS * 3)) ] 2>/dev/null && break
			sleep 0.1
		done
		sleep 1 # the catch-ups join
	fi
	declare -A c0 f0
	local procs=("${ports[@]}")
	[ "$mode" = workers ] && procs+=(18183)
	for port in "${procs[@]}"; do
		c0[$port]=$(cpu "$(cat "$dir/pid.$port")")
		f0[$port]=$(fetched "$port")
	done
	local t0
	t0=$(date +%s.%N)
	for i in $(seq -w 1 "$TENANTS"); do
		for _ in $(seq 1 $((EVENTS / 500))); do
			curl -sf -o /dev/null -H "Authorization: Bearer $(key "$i")" -H 'Content-Type: application/x-ndjson' \
				--data-binary "@$dir/batch.ndjson" http://127.0.0.1:18181/aep/events
		done
	done
	local want=$((EVENTS * TENANTS)) got=0
	for _ in $(seq 1 600); do
		got=0
		for port in "${ports[@]}"; do
			got=$((got + $(cat "$dir/$mode.$port".*.sse | grep -c '^data:' || true)))
		done
		[ "$got" -ge $((2 * want)) ] && break
		sleep 0.2
	done
	local t1
	t1=$(date +%s.%N)
	local hz
	hz=$(getconf CLK_TCK)
	for port in "${procs[@]}"; do
		local pid role=node
		pid=$(cat "$dir/pid.$port")
		[ "$port" = 18183 ] && role=worker
		local cs
		cs=$(echo "scale=3; ($(cpu "$pid") - ${c0[$port]}) / $hz" | bc)
		local per=-
		[ "$role" = node ] && per=$(echo "scale=0; $want / $cs" | bc)
		printf '%s mode=%s %s port=%s kafka_conns=%s fetched_MB=%s cpu_s=%s deliveries_per_cpu_s=%s\n' \
			"$(date -u +%H:%M:%S)" "$mode" "$role" "$port" "$(conns "$pid")" \
			"$(echo "scale=1; ($(fetched "$port") - ${f0[$port]}) / 1000000" | bc)" "$cs" "$per"
	done
	printf 'mode=%s delivered=%d of %d in %.1fs; load %s\n' "$mode" "$got" $((2 * want)) \
		"$(echo "$t1 - $t0" | bc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
	for port in "${procs[@]}"; do kill "$(cat "$dir/pid.$port")"; done
	xargs kill <"$dir/curls.$mode" 2>/dev/null || true
	wait 2>/dev/null || true
}
for mode in ${MODES:-tail workers}; do run "$mode"; done
