#!/usr/bin/env bash
# Runs the dialect R live endpoint checker (conformance/live.js of
# agenteventprotocol/agent-event-protocol) against two gateway nodes sharing
# one Kafka, with a control-capable target (aepctl target) connected to one
# of them. Nothing is fetched from the network: LIVE_JS is the path of
# live.js, or "vendored" (the default) for the copy in
# integration/testdata/aep-r-live.
#
#   [LIVE_DELIVERY=workers] scripts/live-check.sh [LIVE_JS|vendored] [other|same] [extra live.js flags...]
#
# LIVE_DELIVERY=workers runs every gateway with --live-delivery workers
# --role all (each also runs a filter worker); the default is tail.
# other (default): the checker talks to node A, the target is connected to
#   node B: the roster, commands, acks and refusals cross nodes through Kafka.
# same: the target is connected to node A too.
# Node A runs the embedded broker (kfake) unless KAFKA_BROKERS names one;
# both nodes use --api-keys (the run is authenticated: --token),
# --replay-buffer 256 and the checker runs with --evict. A second,
# unauthenticated checker run (--checks control-auth-gate) against a third,
# development-mode node probes the control auth gate, which the
# authenticated run skips by design.
# Needs node >= 22, or node 20/21 (run with --experimental-websocket).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
live_js=${1:-vendored}
[ "$live_js" = vendored ] && live_js=$root/integration/testdata/aep-r-live/live.js
topology=${2:-other}
shift $(( $# >= 2 ? 2 : $# ))
[ -f "$live_js" ] || { echo "live-check: $live_js: no such file" >&2; exit 2; }
case $topology in other|same) ;; *) echo "live-check: topology $topology: want other or same" >&2; exit 2;; esac
mode_flags=()
case ${LIVE_DELIVERY:-tail} in
tail) ;;
workers) mode_flags=(--live-delivery workers --role all) ;;
*) echo "live-check: LIVE_DELIVERY=$LIVE_DELIVERY: want tail or workers" >&2; exit 2 ;;
esac
command -v node >/dev/null || { echo "live-check: node is not installed" >&2; exit 2; }
node_flags=()
if [ "$(node -e 'console.log(typeof WebSocket)')" != function ]; then
	node_flags=(--experimental-websocket)
fi

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$root" && go build -o "$work/aep-gateway" ./cmd/aep-gateway && go build -o "$work/aepctl" ./cmd/aepctl)
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "default sha256:$(printf %s "$token" | sha256sum | cut -d' ' -f1)" > "$work/keys"

# start NAME ARGS...: starts a gateway, waits until it serves, sets
# url_NAME (and kafka_NAME when it runs the embedded broker).
start() {
	local name=$1; shift
	"$work/aep-gateway" --listen 127.0.0.1:0 --log-format json --replay-buffer 256 \
		--topic-partitions 3 --topic-replication-factor 1 --node-id "$name" "${mode_flags[@]}" "$@" 2> "$work/$name.log" &
	pids+=($!)
	for _ in $(seq 300); do
		if grep -q '"aep-gateway serving"' "$work/$name.log"; then
			printf -v "url_$name" '%s' "$(grep '"aep-gateway serving"' "$work/$name.log" | sed 's/.*"listen":"\([^"]*\)".*/\1/')"
			printf -v "kafka_$name" '%s' "$(grep -m1 'embedded Kafka-protocol broker started' "$work/$name.log" | sed -n 's/.*"kafka":"\([^"]*\)".*/\1/p')"
			return
		fi
		sleep 0.1
	done
	echo "live-check: gateway $name did not start:" >&2
	cat "$work/$name.log" >&2
	exit 1
}

if [ -n "${KAFKA_BROKERS:-}" ]; then
	start a --api-keys "$work/keys" --kafka-brokers "$KAFKA_BROKERS"
	brokers=$KAFKA_BROKERS
else
	start a --api-keys "$work/keys" --data-dir "$work/data" --embedded-kafka-listen 127.0.0.1:0
	brokers=$kafka_a
fi
start b --api-keys "$work/keys" --kafka-brokers "$brokers"
start dev --kafka-brokers "$brokers"

target_url=$url_b
[ "$topology" = same ] && target_url=$url_a
session="live-target-$(date +%s%N)"
run="run-$(date +%s%N)"
"$work/aepctl" target --url "$target_url" --token "$token" --session "$session" --run "$run" > "$work/target.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q 'target ready' "$work/target.log" && break; sleep 0.1; done
grep -q 'target ready' "$work/target.log" || { echo "live-check: target did not start:" >&2; cat "$work/target.log" >&2; exit 1; }

echo "live-check: ${LIVE_DELIVERY:-tail} mode; checker -> node a ($url_a), target -> node $([ "$topology" = same ] && echo a || echo b) ($target_url)"
status=0
node "${node_flags[@]}" "$live_js" "$url_a" --token "$token" --evict \
	--control-session "$session" --control-cancel "$run" "$@" || status=$?
echo
echo "live-check: unauthenticated run against the development-mode node ($url_dev)"
node "${node_flags[@]}" "$live_js" "$url_dev" --checks control-auth-gate || status=$?
echo
echo "live-check: target log:"
cat "$work/target.log"
exit $status
