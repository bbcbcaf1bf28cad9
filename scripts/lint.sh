#!/usr/bin/env bash
# Runs golangci-lint (version GOLANGCI_LINT_VERSION, default v2.15.0) with the checked-in .golangci.yml over
# every package. A golangci-lint of that version on PATH or in $(go env GOPATH)/bin is used; otherwise it is
# built from its Go module with `go install` (a few minutes, once per machine).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="${GOLANGCI_LINT_VERSION:-v2.15.0}"

find_lint() {
	local bin
	for bin in "$(command -v golangci-lint 2>/dev/null || true)" "$(go env GOPATH)/bin/golangci-lint"; do
		if [ -n "$bin" ] && [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "version ${VERSION#v} "; then
			echo "$bin"
			return
		fi
	done
	echo "lint.sh: building golangci-lint $VERSION from its Go module (once)" >&2
	(cd / && GOFLAGS=-mod=mod go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$VERSION") >&2
	echo "$(go env GOPATH)/bin/golangci-lint"
}

LINT="$(find_lint)"
cd "$ROOT"
"$LINT" version >&2
exec "$LINT" run ./...
