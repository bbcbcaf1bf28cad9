# Targets match the README. `make run` and `make test` need only Go.
GO        ?= go
GOFLAGS   ?=
PKGS      ?= ./...
BENCHTIME ?= 1s
# The release's version (VERSION, also the chart's version and appVersion) and the commit, stamped into
# the binary: `aep-gateway --version` and the aep_build_info metric show them.
VERSION   ?= $(shell cat VERSION 2>/dev/null)
REVISION  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS   ?= -X main.version=$(VERSION) -X main.revision=$(REVISION)

.PHONY: run build test test-short bench bench-report fuzz vet lint tidy-check kafka-up kafka-down clean

## run: start the gateway; with no --kafka-brokers it embeds a Kafka-protocol broker with data in ./data
run:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/aep-gateway $(ARGS)

## build: build the binaries into ./bin
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

## test: vet, then every test this machine can run (race detector on); integration tests use
## KAFKA_BROKERS when set, else testcontainers when Docker answers, else the embedded broker
test: vet
	$(GO) test $(GOFLAGS) -race -count=1 -timeout 30m $(PKGS)

## test-short: the fast in-package tests only
test-short:
	$(GO) test $(GOFLAGS) -short -count=1 $(PKGS)

## bench: the Go benchmarks with allocation figures
bench:
	$(GO) test $(GOFLAGS) -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-report: the comparative benchmarks of issue 13 in one run with bin/aepbench (ingest vs franz-go on
## real Kafka and on the embedded broker, fan-out with single-event and batched publishes, with the broker's
## CPU, and idle connections vs Centrifugo v6.9.1, latency vs direct produce→consume, resume 1M vs 10k) on
## the Kafka at KAFKA_BROKERS (default 127.0.0.1:9092); writes docs/benchmarks.md's generated section and
## docs/images/bench-*.svg. About 15 min on 2 cores; knobs: BENCH_DURATION BENCH_SUBS BENCH_FANOUT_SINGLE_SUBS
## BENCH_FANOUT_DURATION BENCH_FANOUT_TRANSPORTS BENCH_RATES BENCH_IDLE BENCH_RESUME BENCH_OUT CENTRIFUGO
## KAFKA_PID (scripts/bench-report.sh)
bench-report:
	GO=$(GO) bash scripts/bench-report.sh

## vet: go vet
vet:
	$(GO) vet $(PKGS)

## lint: golangci-lint with .golangci.yml (builds the pinned version once when missing; CI runs it)
lint:
	bash scripts/lint.sh

## tidy-check: go.mod and go.sum are exactly what `go mod tidy` leaves (CI runs it)
tidy-check:
	$(GO) mod tidy -diff

## kafka-up / kafka-down: a real single-node Apache Kafka (KRaft) on 127.0.0.1:9092, fetched from Maven Central
kafka-up:
	bash scripts/kafka.sh up

kafka-down:
	bash scripts/kafka.sh down

clean:
	rm -rf bin data .kafka
