#!/usr/bin/env bash
# chart-check.sh: lint and render charts/aep-gateway with every values file under its ci/ folder, check
# what the renders contain, and check that the configurations the chart must refuse are refused.
#
#   bash scripts/chart-check.sh
#
# Exit status: 0 all checks pass, 1 a check failed, 3 no helm could be found or built.
# Uses `helm` from PATH or $(go env GOPATH)/bin; when there is none it builds Helm from its Go module
# (helm.sh/helm/v3, HELM_VERSION, default v3.19.0) with `go install`, which takes a few minutes once.
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$ROOT/charts/aep-gateway"
HELM_VERSION="${HELM_VERSION:-v3.19.0}"
KUBE_VERSION="${KUBE_VERSION:-1.30.0}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

log() { printf 'chart-check: %s\n' "$*" >&2; }
failures=0
fail() {
	log "FAIL: $*"
	failures=$((failures + 1))
}

find_helm() {
	if command -v helm >/dev/null 2>&1; then
		command -v helm
		return
	fi
	local gobin
	gobin="$(go env GOPATH)/bin"
	if [ ! -x "$gobin/helm" ]; then
		log "building helm $HELM_VERSION from its Go module (once)"
		(cd / && GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >&2 || return 1
	fi
	echo "$gobin/helm"
}
# Exit status 3 says "no helm could be had", which callers may treat differently from a failed check.
HELM="$(find_helm)" || { log "no helm: not on PATH and go install failed"; exit 3; }
"$HELM" version --short >&2

render() { # render NAME [helm args...]: renders into $OUT/NAME.yaml, returns helm's status
	local name="$1"
	shift
	"$HELM" template aep "$CHART" --namespace events --kube-version "$KUBE_VERSION" "$@" >"$OUT/$name.yaml" 2>"$OUT/$name.err"
}

has() { grep -qF -- "$2" "$OUT/$1.yaml" || fail "$1: expected to find: $2"; }
hasnt() { ! grep -qF -- "$2" "$OUT/$1.yaml" || fail "$1: expected NOT to find: $2"; }

# --- good configurations -----------------------------------------------------------------------------

for values in "$CHART"/ci/*-values.yaml; do
	name="$(basename "$values" -values.yaml)"
	if ! "$HELM" lint --strict --kube-version "$KUBE_VERSION" "$CHART" -f "$values" >"$OUT/lint-$name.log" 2>&1; then
		cat "$OUT/lint-$name.log" >&2
		fail "helm lint with ci/$(basename "$values")"
	fi
	if ! render "$name" -f "$values"; then
		cat "$OUT/$name.err" >&2
		fail "helm template with ci/$(basename "$values")"
	fi
done

# Every render: probes on the http port, non-root, read-only root file system.
for name in external embedded existing-secret; do
	[ -f "$OUT/$name.yaml" ] || continue
	has "$name" "path: /readyz"
	has "$name" "path: /healthz"
	has "$name" "runAsNonRoot: true"
	has "$name" "readOnlyRootFilesystem: true"
	has "$name" 'value: "0.0.0.0:8080"'
done

has external "kind: HorizontalPodAutoscaler"
has external "kind: ServiceMonitor"
has external "path: /metrics"
has external "release: prometheus"
has external 'value: "SCRAM-SHA-512"'
has external "name: AEP_KAFKA_TLS_CERT"
has external "value: /etc/aep-gateway/kafka-tls/tls.key"
has external "secretName: kafka-client-tls"
has external "name: kafka-sasl"
has external "beta.team_2 sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
has external "maxUnavailable: 1"
has external 'image: "registry.example.com/aep-gateway:1.2.3"'
has external 'value: "binding"'
has external "- --log-level=debug"
hasnt external "replicas:" # the HPA owns the replica count
hasnt external "AEP_ALLOW_UNAUTHENTICATED"

has embedded "replicas: 1"
has embedded "type: Recreate"
has embedded "kind: PersistentVolumeClaim"
has embedded "claimName: aep-aep-gateway-data"
has embedded 'storageClassName: "standard"'
has embedded "name: AEP_ALLOW_UNAUTHENTICATED"
has embedded "name: AEP_DATA_DIR"
hasnt embedded "AEP_KAFKA_BROKERS"
hasnt embedded "kind: PodDisruptionBudget"
hasnt embedded "topologySpreadConstraints"

has existing-secret "secretName: aep-keys"
has existing-secret "value: /etc/aep-gateway/api-keys/keys.txt"
has existing-secret "name: aep-aep-gateway-kafka-sasl"
has existing-secret "password: \"$(printf %s not-a-real-password | base64)\""
hasnt existing-secret "aep-aep-gateway-api-keys"
hasnt existing-secret "kind: PodDisruptionBudget"

# Structure, where PyYAML exists: every document parses and names itself; env names are unique.
if python3 -c 'import yaml' 2>/dev/null; then
	python3 - "$OUT"/external.yaml "$OUT"/embedded.yaml "$OUT"/existing-secret.yaml <<'EOF' || fail "rendered manifests are not well-formed"
import sys, yaml
bad = 0
for path in sys.argv[1:]:
    for doc in yaml.safe_load_all(open(path)):
        if doc is None:
            continue
        where = f"{path}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if not doc.get("apiVersion") or not doc.get("kind") or not doc.get("metadata", {}).get("name"):
            print("incomplete document", where); bad += 1
        if doc.get("kind") == "Deployment":
            spec = doc["spec"]["template"]["spec"]
            for c in spec["containers"]:
                names = [e["name"] for e in c.get("env", [])]
                if len(names) != len(set(names)):
                    print("duplicate env", where, sorted(n for n in names if names.count(n) > 1)); bad += 1
                mounts = {m["name"] for m in c.get("volumeMounts", [])}
                vols = {v["name"] for v in spec.get("volumes", [])}
                if not mounts <= vols:
                    print("mount without volume", where, mounts - vols); bad += 1
            sel = doc["spec"]["selector"]["matchLabels"]
            labels = doc["spec"]["template"]["metadata"]["labels"]
            if any(labels.get(k) != v for k, v in sel.items()):
                print("selector does not match pod labels", where); bad += 1
sys.exit(1 if bad else 0)
EOF
else
	log "python3 yaml module missing: structural checks skipped"
fi

# --- configurations the chart must refuse -----------------------------------------------------------

KEY=(--set auth.apiKeys[0].tenant=acme --set auth.apiKeys[0].sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08)
refuse() { # refuse NAME MESSAGE [helm args...]
	local name="$1" want="$2"
	shift 2
	if render "refuse-$name" "$@"; then
		fail "refuse-$name: rendered, want an error containing: $want"
	elif ! grep -qF -- "$want" "$OUT/refuse-$name.err"; then
		fail "refuse-$name: error was: $(cat "$OUT/refuse-$name.err"), want: $want"
	fi
}
refuse defaults "kafka.brokers is required"
refuse no-keys "auth.apiKeys or auth.existingSecret is required" --set kafka.brokers=k:9092
refuse both-brokers "exclude each other" --set kafka.brokers=k:9092 --set embedded.enabled=true "${KEY[@]}"
refuse bad-digest "64 hex characters" --set kafka.brokers=k:9092 --set auth.apiKeys[0].tenant=acme --set auth.apiKeys[0].sha256=abc
refuse bad-tenant "must be letters" --set kafka.brokers=k:9092 --set "auth.apiKeys[0].tenant=a b" --set auth.apiKeys[0].sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
refuse bad-sasl "kafka.sasl.mechanism must be" --set kafka.brokers=k:9092 --set kafka.sasl.mechanism=GSSAPI --set kafka.sasl.username=u "${KEY[@]}"
refuse sasl-no-user "kafka.sasl.username is required" --set kafka.brokers=k:9092 --set kafka.sasl.mechanism=PLAIN --set kafka.sasl.password=p "${KEY[@]}"
refuse sasl-no-password "kafka.sasl.existingSecret (or kafka.sasl.password)" --set kafka.brokers=k:9092 --set kafka.sasl.mechanism=PLAIN --set kafka.sasl.username=u "${KEY[@]}"
refuse half-mtls "go together" --set kafka.brokers=k:9092 --set kafka.tls.enabled=true --set kafka.tls.existingSecret=s --set kafka.tls.certKey=tls.crt "${KEY[@]}"
refuse embedded-hpa "autoscaling needs an external Kafka" --set embedded.enabled=true --set autoscaling.enabled=true "${KEY[@]}"
refuse pdb-both "not both" --set kafka.brokers=k:9092 --set podDisruptionBudget.maxUnavailable=1 "${KEY[@]}"

if [ "$failures" != 0 ]; then
	log "$failures check(s) failed"
	exit 1
fi
log "chart lints, renders and refuses as expected"
