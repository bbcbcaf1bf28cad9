// Package chartcheck holds the chart's render tests: charts/aep-gateway
// rendered with helm for every supported Kubernetes minor and decoded
// strictly into the Kubernetes, Gateway API and prometheus-operator Go
// types, so a misspelt or misplaced field fails here instead of being
// dropped (or refused) by the API server. It is a module of its own so
// that the gateway's go.mod does not carry the Kubernetes API types.
//
//	cd scripts/chartcheck && HELM=$(command -v helm) go test ./...
package chartcheck
