#!/usr/bin/env bash
# kafka.sh: a real single-node Apache Kafka (KRaft, combined broker+controller) for development and CI.
#
#   bash scripts/kafka.sh up       fetch Kafka from Maven Central (once), format storage (once), start, wait
#   bash scripts/kafka.sh down     stop it (SIGTERM, wait, SIGKILL); idempotent
#   bash scripts/kafka.sh status   exit 0 and say so when it runs, exit 1 otherwise
#   bash scripts/kafka.sh env      print KAFKA_BROKERS=host:port
#   bash scripts/kafka.sh reset    stop it and delete its data (keeps the downloaded jars)
#
# The jars come from Maven Central through `mvn dependency:copy-dependencies` (a generated pom), because
# Maven Central is the only host that serves Kafka here; nothing else is downloaded.
#
# Environment (all optional):
#   KAFKA_VERSION          org.apache.kafka:kafka_2.13 version           (default 4.1.1)
#   KAFKA_HOST             address both listeners bind to               (default 127.0.0.1)
#   KAFKA_PORT             PLAINTEXT client listener port               (default 9092)
#   KAFKA_CONTROLLER_PORT  KRaft CONTROLLER listener port               (default 9093)
#   KAFKA_DIR              working directory: jars, config, data, log   (default <repo>/.kafka)
#   KAFKA_HEAP_OPTS        JVM heap flags                               (default -Xms256m -Xmx1g)
#   KAFKA_START_TIMEOUT    seconds to wait for the broker to answer     (default 300)
#   KAFKA_LOG_LEVEL        root log level of the broker                 (default WARN)
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
KAFKA_HOST="${KAFKA_HOST:-127.0.0.1}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_DIR="${KAFKA_DIR:-$ROOT/.kafka}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-300}"
KAFKA_LOG_LEVEL="${KAFKA_LOG_LEVEL:-WARN}"

LIB_DIR="$KAFKA_DIR/lib-$KAFKA_VERSION"
DATA_DIR="$KAFKA_DIR/data"
CONFIG="$KAFKA_DIR/server.properties"
LOG4J="$KAFKA_DIR/log4j2.properties"
LOG_FILE="$KAFKA_DIR/kafka.log"
PID_FILE="$KAFKA_DIR/kafka.pid"
STAMP="$DATA_DIR/.aep-formatted"
PROBE="$KAFKA_DIR/kafkaprobe"
BROKERS="$KAFKA_HOST:$KAFKA_PORT"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- tools -------------------------------------------------------------------------------------------

apt_updated=0
apt_install() {
	command -v apt-get >/dev/null 2>&1 || die "$* missing and apt-get is not available; install it by hand"
	[ "$(id -u)" = 0 ] || die "$* missing; run as root or install it by hand"
	if [ "$apt_updated" = 0 ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=1
	fi
	log "apt-get install -y $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

java_major() {
	# `java -version` prints e.g.: openjdk version "17.0.15" 2025-04-15 (or "1.8.0_..." for Java 8)
	local v
	v="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
	case "$v" in
	1.*) echo "${v#1.}" | cut -d. -f1 ;;
	*) echo "${v%%[.+-]*}" ;;
	esac
}

ensure_tools() {
	if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ] 2>/dev/null; then
		# Debian 12 has 17, Debian 13 only 21; default-jre-headless is whatever the release ships.
		apt_install openjdk-17-jre-headless || apt_install openjdk-21-jre-headless || apt_install default-jre-headless
	fi
	command -v java >/dev/null 2>&1 || die "java not found after install"
	[ "$(java_major)" -ge 17 ] || die "Kafka 4.x needs Java 17 or newer; found $(java -version 2>&1 | head -1)"
	if [ ! -f "$LIB_DIR/.complete" ] && ! command -v mvn >/dev/null 2>&1; then
		apt_install maven
	fi
}

# --- jars --------------------------------------------------------------------------------------------

fetch_jars() {
	[ -f "$LIB_DIR/.complete" ] && return 0
	local work="$KAFKA_DIR/mvn"
	mkdir -p "$work"
	# kafka_2.13 brings the broker, the controller, StorageTool and log4j-core; the two logging jars make
	# the broker's SLF4J calls reach log4j2 (without them it logs nothing at all).
	cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.aep-gateway</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
EOF
	log "fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies with Maven"
	rm -rf "$LIB_DIR.tmp"
	local attempt force=()
	for attempt in 1 2 3; do
		if mvn -q -B -ntp "${force[@]}" -f "$work/pom.xml" dependency:copy-dependencies \
			-DincludeScope=runtime -DoutputDirectory="$LIB_DIR.tmp" >"$work/mvn.log" 2>&1; then
			break
		fi
		# Maven caches a failed resolution; -U makes the retry ask Maven Central again.
		force=(-U)
		log "maven attempt $attempt failed:"
		sed 's/\x1b\[[0-9;]*m//g' "$work/mvn.log" | grep -v '^\[ERROR\] *$' | grep -v -e 'Re-run Maven' -e 'full stack trace' -e 'read the following articles' -e '\[Help 1\] http' | tail -n 8 >&2 || true
		[ "$attempt" = 3 ] && die "could not fetch Kafka jars from Maven Central"
		sleep $((attempt * 5))
	done
	[ -f "$LIB_DIR.tmp/kafka_2.13-$KAFKA_VERSION.jar" ] || die "kafka_2.13-$KAFKA_VERSION.jar missing after Maven run"
	rm -rf "$LIB_DIR"
	mv "$LIB_DIR.tmp" "$LIB_DIR"
	touch "$LIB_DIR/.complete"
	log "$(find "$LIB_DIR" -name '*.jar' | wc -l) jars in $LIB_DIR"
}

# --- config ------------------------------------------------------------------------------------------

write_config() {
	mkdir -p "$KAFKA_DIR"
	cat >"$CONFIG.new" <<EOF
# Generated by scripts/kafka.sh; edits are overwritten. Single node: broker and KRaft controller in one JVM.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$DATA_DIR
metadata.log.dir=$DATA_DIR

# One node: every internal topic has one replica.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# Tests create their topics explicitly and want groups to form at once.
auto.create.topics.enable=false
delete.topic.enable=true
group.initial.rebalance.delay.ms=0

# Keep a development disk small.
log.retention.hours=24
log.segment.bytes=67108864
num.network.threads=2
num.io.threads=4
EOF
	mv "$CONFIG.new" "$CONFIG"
	cat >"$LOG4J" <<EOF
# Generated by scripts/kafka.sh: warnings and errors only, plus the lines that say the server started/stopped.
status = error
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = $KAFKA_LOG_LEVEL
rootLogger.appenderRef.out.ref = STDOUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.state.name = state.change.logger
logger.state.level = ERROR
EOF
}

classpath() { echo "$LIB_DIR/*"; }

jvm_flags() {
	# shellcheck disable=SC2086
	echo $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		"-Dlog4j2.configurationFile=$LOG4J" "-Dkafka.logs.dir=$KAFKA_DIR"
}

# The data directory is formatted for one listener layout; a changed layout (ports, host, version) gets
# a fresh directory instead of a broker that refuses to start.
format_storage() {
	local want
	want="$KAFKA_VERSION $KAFKA_HOST $KAFKA_PORT $KAFKA_CONTROLLER_PORT"
	if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -f "$DATA_DIR/meta.properties" ]; then
		return 0
	fi
	rm -rf "$DATA_DIR"
	mkdir -p "$DATA_DIR"
	local cluster_id
	# shellcheck disable=SC2046
	cluster_id="$(java $(jvm_flags) -cp "$(classpath)" kafka.tools.StorageTool random-uuid 2>>"$LOG_FILE" | tail -n 1)"
	[ -n "$cluster_id" ] || die "StorageTool random-uuid printed nothing; see $LOG_FILE"
	log "formatting $DATA_DIR (cluster id $cluster_id)"
	# shellcheck disable=SC2046
	java $(jvm_flags) -cp "$(classpath)" kafka.tools.StorageTool format \
		--config "$CONFIG" --cluster-id "$cluster_id" --ignore-formatted >>"$LOG_FILE" 2>&1 ||
		{ tail -n 30 "$LOG_FILE" >&2; die "StorageTool format failed"; }
	echo "$want" >"$STAMP"
}

# --- process -----------------------------------------------------------------------------------------

running_pid() {
	[ -f "$PID_FILE" ] || return 1
	local pid
	pid="$(cat "$PID_FILE" 2>/dev/null)"
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	# Guard against a recycled pid: it must be our JVM, started with our config.
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$CONFIG" || return 1
	echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_ready() {
	local pid="$1" deadline=$((SECONDS + KAFKA_START_TIMEOUT))
	until port_open "$KAFKA_HOST" "$KAFKA_PORT"; do
		kill -0 "$pid" 2>/dev/null || { tail -n 60 "$LOG_FILE" >&2; die "broker exited during start-up"; }
		[ "$SECONDS" -lt "$deadline" ] || { tail -n 60 "$LOG_FILE" >&2; die "broker port $KAFKA_PORT not open after ${KAFKA_START_TIMEOUT}s"; }
		sleep 0.5
	done
	# An open port is not a ready broker: ask it over the Kafka protocol for its broker list.
	if [ -x "$PROBE" ]; then
		local left=$((deadline - SECONDS))
		[ "$left" -gt 10 ] || left=10
		"$PROBE" -brokers "$BROKERS" -timeout "${left}s" ||
			{ tail -n 60 "$LOG_FILE" >&2; die "broker did not answer the Kafka protocol probe"; }
	else
		log "no Kafka protocol probe (go missing?): readiness checked by TCP connect only"
	fi
}

# build_probe compiles scripts/kafkaprobe before the JVM starts, so compile time never eats into the
# start-up timeout and the compiler does not compete with the starting broker for the CPU.
build_probe() {
	if command -v go >/dev/null 2>&1 && [ -f "$ROOT/scripts/kafkaprobe/main.go" ]; then
		(cd "$ROOT" && go build -o "$PROBE" ./scripts/kafkaprobe) || { log "could not build the probe"; rm -f "$PROBE"; }
	fi
}

cmd_up() {
	ensure_tools
	local pid
	if pid="$(running_pid)"; then
		log "already running (pid $pid)"
		mkdir -p "$KAFKA_DIR"
		build_probe
		wait_ready "$pid"
		echo "KAFKA_BROKERS=$BROKERS"
		return 0
	fi
	if port_open "$KAFKA_HOST" "$KAFKA_PORT"; then
		die "$BROKERS is already taken by another process; set KAFKA_PORT (and KAFKA_CONTROLLER_PORT)"
	fi
	if port_open "$KAFKA_HOST" "$KAFKA_CONTROLLER_PORT"; then
		die "$KAFKA_HOST:$KAFKA_CONTROLLER_PORT is already taken; set KAFKA_CONTROLLER_PORT"
	fi
	fetch_jars
	build_probe
	write_config
	: >"$LOG_FILE"
	format_storage
	log "starting Kafka $KAFKA_VERSION on $BROKERS (controller $KAFKA_HOST:$KAFKA_CONTROLLER_PORT), log $LOG_FILE"
	# setsid: the broker outlives this script and ignores the terminal's signals; `down` stops it by pid.
	# shellcheck disable=SC2046
	setsid nohup java $(jvm_flags) -cp "$(classpath)" kafka.Kafka "$CONFIG" \
		>>"$LOG_FILE" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$PID_FILE"
	wait_ready "$pid"
	log "ready (pid $pid)"
	echo "KAFKA_BROKERS=$BROKERS"
}

cmd_down() {
	local pid
	if ! pid="$(running_pid)"; then
		rm -f "$PID_FILE"
		log "not running"
		return 0
	fi
	log "stopping pid $pid"
	kill -TERM "$pid" 2>/dev/null || true
	local _
	for _ in $(seq 1 60); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "still running after 30s; SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		for _ in $(seq 1 20); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
	fi
	rm -f "$PID_FILE"
	log "stopped"
}

cmd_status() {
	local pid
	if pid="$(running_pid)"; then
		echo "running pid=$pid brokers=$BROKERS log=$LOG_FILE"
		return 0
	fi
	echo "not running"
	return 1
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) echo "KAFKA_BROKERS=$BROKERS" ;;
reset)
	cmd_down
	rm -rf "$DATA_DIR"
	log "data removed"
	;;
*)
	echo "usage: $0 up|down|status|env|reset" >&2
	exit 2
	;;
esac
