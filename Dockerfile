# syntax=docker/dockerfile:1
# aep-gateway container image: a static Go binary on distroless, running as a non-root user.
#
#   docker build -t aep-gateway:dev .
#   docker run --rm -p 8080:8080 -e AEP_KAFKA_BROKERS=kafka:9092 \
#     -v $PWD/api-keys:/etc/aep-gateway/api-keys:ro -e AEP_API_KEYS=/etc/aep-gateway/api-keys aep-gateway:dev
#
# Every flag has an AEP_* environment twin (--kafka-brokers is AEP_KAFKA_BROKERS). The image listens on
# 0.0.0.0:8080; without AEP_API_KEYS a non-loopback listener refuses to start unless
# AEP_ALLOW_UNAUTHENTICATED=true (development only). Without AEP_KAFKA_BROKERS the embedded single-node
# broker keeps its data in /var/lib/aep-gateway: mount a volume there, and run one replica only.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
# The commit, for `aep-gateway --version` and aep_build_info: docker build --build-arg REVISION=$(git rev-parse --short=12 HEAD)
ARG REVISION=unknown
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w -X main.version=$(cat VERSION) -X main.revision=${REVISION}" -o /out/aep-gateway ./cmd/aep-gateway \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="aep-gateway" \
      org.opencontainers.image.description="Kafka-backed durable event gateway for the Agent Event Protocol"
COPY --from=build /out/aep-gateway /usr/local/bin/aep-gateway
COPY --from=build --chown=65532:65532 /out/data /var/lib/aep-gateway
ENV AEP_LISTEN=0.0.0.0:8080 \
    AEP_DATA_DIR=/var/lib/aep-gateway \
    AEP_LOG_FORMAT=json
USER 65532:65532
EXPOSE 8080
VOLUME ["/var/lib/aep-gateway"]
ENTRYPOINT ["/usr/local/bin/aep-gateway"]
