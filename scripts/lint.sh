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
	if ! (cd / && GOFLAGS=-mod=mod go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$VERSION") >&2; then
		echo "lint.sh: golangci-lint $VERSION did not build (registry trouble?)" >&2
		return 1
	fi
	echo "$(go env GOPATH)/bin/golangci-lint"
}

# Exit status 3: no linter (it did not build); anything else is golangci-lint's own.
LINT="$(find_lint)" || exit 3
cd "$ROOT"
"$LINT" version >&2
exec "$LINT" run ./...
