# Targets match the README. `make run` and `make test` need only Go.
GO        ?= go
GOFLAGS   ?=
PKGS      ?= ./...
BENCHTIME ?= 1s
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null)

.PHONY: run build test test-short bench fuzz vet kafka-up kafka-down clean

## run: start the gateway; with no --kafka-brokers it embeds a Kafka-protocol broker with data in ./data
run:
	$(GO) run ./cmd/aep-gateway $(ARGS)

## build: build the binaries into ./bin
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/...

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

## vet: go vet
vet:
	$(GO) vet $(PKGS)

## kafka-up / kafka-down: a real single-node Apache Kafka (KRaft) on 127.0.0.1:9092, fetched from Maven Central
kafka-up:
	bash scripts/kafka.sh up

kafka-down:
	bash scripts/kafka.sh down

clean:
	rm -rf bin data .kafka
