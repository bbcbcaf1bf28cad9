#!/usr/bin/env bash
# chart-check.sh: lint and render charts/aep-gateway with no values and with every values file under its
# ci/ folder, render every `helm install|upgrade|template` example the docs show, check what the renders
# contain, check that the configurations the chart must refuse are refused, and check that the chart's
# version and appVersion are the release's (VERSION). The renders here pass no --kube-version or other
# extra flag (what works here works for a user's plain `helm template`); scripts/chartcheck renders per
# supported Kubernetes minor and decodes strictly.
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
	"$HELM" template aep "$CHART" --namespace events "$@" >"$OUT/$name.yaml" 2>"$OUT/$name.err"
}

has() { grep -qF -- "$2" "$OUT/$1.yaml" || fail "$1: expected to find: $2"; }
hasnt() { ! grep -qF -- "$2" "$OUT/$1.yaml" || fail "$1: expected NOT to find: $2"; }

# --- good configurations -----------------------------------------------------------------------------

lint() { # lint NAME [helm args...]
	local name="$1"
	shift
	if ! "$HELM" lint --strict "$CHART" "$@" >"$OUT/lint-$name.log" 2>&1; then
		cat "$OUT/lint-$name.log" >&2
		fail "helm lint --strict $*"
	fi
}

# No values at all: the "try it" install.
lint defaults
render defaults || { cat "$OUT/defaults.err" >&2; fail "helm template with no values"; }
for values in "$CHART"/ci/*-values.yaml; do
	name="$(basename "$values" -values.yaml)"
	lint "$name" -f "$values"
	if ! render "$name" -f "$values"; then
		cat "$OUT/$name.err" >&2
		fail "helm template with ci/$(basename "$values")"
	fi
done

# The release's version: Chart.yaml's version and appVersion (the image tag's default) are VERSION's.
release="$(tr -d '[:space:]' <"$ROOT/VERSION")"
grep -qx "version: $release" "$CHART/Chart.yaml" || fail "Chart.yaml version is not VERSION ($release)"
grep -qx "appVersion: \"$release\"" "$CHART/Chart.yaml" || fail "Chart.yaml appVersion is not VERSION ($release)"
has defaults "image: \"aep-gateway:$release\""

# Every `helm install|upgrade|template ... charts/aep-gateway` example in the docs, run as bash would run
# it (quoting and escapes included), as `helm template`. KEY stands for a client's API key.
mkdir -p "$OUT/docs"
awk -v out="$OUT/docs" '
	FNR == 1 { inblock = 0; cont = 0 }
	/^```/ { inblock = !inblock; next }
	!inblock { next }
	cont { print > file; if ($0 !~ /\\$/) { close(file); cont = 0 }; next }
	/^[[:space:]]*helm (install|upgrade|template) / && /charts\/aep-gateway/ {
		file = out "/example-" (++n) ".sh"
		sub(/^[[:space:]]*helm (install|upgrade --install|upgrade|template) /, "helm template ")
		print > file
		if ($0 ~ /\\$/) { cont = 1 } else { close(file) }
	}
' "$ROOT"/README.md "$ROOT"/docs/*.md "$CHART"/README.md
n=0
for example in "$OUT"/docs/example-*.sh; do
	[ -f "$example" ] || continue
	n=$((n + 1))
	if ! (cd "$ROOT" && KEY=example-key PATH="$(dirname "$HELM"):$PATH" bash "$example" >"$example.yaml" 2>"$example.err"); then
		cat "$example.err" >&2
		fail "docs example does not render: $(cat "$example")"
	fi
done
[ "$n" -gt 0 ] || fail "no helm example found in the docs"
log "rendered $n helm example(s) from the docs"

# Every render: probes on the http port, non-root, read-only root file system, the gateway's own drain
# delay (no preStop hook by default: its sleep action needs Kubernetes 1.30+).
renders=(defaults embedded existing-secret external jwt three-replicas)
render three-replicas --set kafka.brokers=k:9092 --set replicaCount=3 || fail "helm template with 3 replicas: $(cat "$OUT/three-replicas.err")"
for name in "${renders[@]}"; do
	[ -f "$OUT/$name.yaml" ] || continue
	has "$name" "path: /readyz"
	has "$name" "path: /healthz"
	has "$name" "runAsNonRoot: true"
	has "$name" "readOnlyRootFilesystem: true"
	has "$name" 'value: "0.0.0.0:8080"'
	has "$name" "name: AEP_DRAIN_DELAY"
	hasnt "$name" "preStop:"
done

# No values: one pod on the embedded broker with its PVC, a generated API key, a cursor key.
has defaults "replicas: 1"
has defaults "type: Recreate"
has defaults "kind: PersistentVolumeClaim"
has defaults "claimName: aep-aep-gateway-data"
has defaults "name: AEP_DATA_DIR"
has defaults "name: aep-aep-gateway-api-keys"
has defaults "default sha256:"
has defaults "name: AEP_API_KEYS"
has defaults "terminationGracePeriodSeconds: 50"
hasnt defaults "AEP_KAFKA_BROKERS"
hasnt defaults "AEP_ALLOW_UNAUTHENTICATED"
# Tracing is off unless an endpoint is given; the cardinality caps are always set.
hasnt defaults "AEP_OTLP_ENDPOINT"
has defaults "name: AEP_METRICS_MAX_TENANTS"
render tracing --set tracing.otlpEndpoint=http://otel:4318 --set-json tracing.sampleRatio=0.25 || fail "helm template with tracing: $(cat "$OUT/tracing.err")"
has tracing "name: AEP_OTLP_ENDPOINT"
has tracing 'value: "0.25"' 
hasnt defaults "kind: PodDisruptionBudget"
hasnt defaults "topologySpreadConstraints"

# Three replicas: one cursor key Secret that every pod mounts.
has three-replicas "replicas: 3"
has three-replicas "name: aep-aep-gateway-cursor-keys"
has three-replicas 'cursor-keys: "1 '
has three-replicas 'value: "/etc/aep-gateway/cursor-keys/cursor-keys"'
has three-replicas "secretName: aep-aep-gateway-cursor-keys"
has three-replicas "kind: PodDisruptionBudget"
has three-replicas "topologySpreadConstraints"
hasnt three-replicas "type: Recreate"

has external "kind: HorizontalPodAutoscaler"
has external "kind: ServiceMonitor"
has external "path: /metrics"
has external "release: prometheus"
has external 'value: "SCRAM-SHA-512"'
has external "name: AEP_KAFKA_TLS_CERT"
has external 'value: "/etc/aep-gateway/kafka-tls/tls.key"'
has external "secretName: kafka-client-tls"
has external "name: kafka-sasl"
has external "beta.team_2 sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
has external "maxUnavailable: 1"
has external 'image: "registry.example.com/aep-gateway:1.2.3"'
has external 'value: "binding"'
has external "- --log-level=debug"
has external "name: aep-aep-gateway-jwt-public-key"
has external 'value: "/etc/aep-gateway/jwt/public.pem"'
has external "kind: Ingress"
has external 'nginx.ingress.kubernetes.io/proxy-buffering: "off"'
has external 'nginx.ingress.kubernetes.io/proxy-read-timeout: "3600"'
has external "cert-manager.io/cluster-issuer: letsencrypt"
has external "grafana_dashboard: \"1\""
has external "aep_ingest_events_total"
has external "name: aep-aep-gateway-cursor-keys"
has external 'value: "4"'
hasnt external "replicas:" # the HPA owns the replica count
hasnt external "AEP_ALLOW_UNAUTHENTICATED"
hasnt external "key: \"aep_" # no generated key beside explicit ones

has embedded "replicas: 1"
has embedded 'storageClassName: "standard"'
has embedded "name: AEP_ALLOW_UNAUTHENTICATED"
has embedded 'value: "500"' # config wins over limits.maxBatchEvents
has embedded 'value: "10s"'
hasnt embedded "AEP_KAFKA_BROKERS"
hasnt embedded "AEP_CURSOR_KEYS"
hasnt embedded "AEP_API_KEYS"

has existing-secret "secretName: aep-keys"
has existing-secret 'value: "/etc/aep-gateway/api-keys/keys.txt"'
has existing-secret "secretName: aep-cursor-keys"
has existing-secret 'value: "/etc/aep-gateway/cursor-keys/keys"'
has existing-secret "name: aep-aep-gateway-kafka-sasl"
has existing-secret "password: \"$(printf %s not-a-real-password | base64)\""
hasnt existing-secret "aep-aep-gateway-api-keys"
hasnt existing-secret "aep-aep-gateway-cursor-keys"
hasnt existing-secret "kind: PodDisruptionBudget"

has jwt "replicas: 3"
has jwt 'value: "https://issuer.example.com/.well-known/jwks.json"'
has jwt "name: AEP_JWT_JWKS_URL"
has jwt 'value: "org"'
has jwt 'value: "https://console.example.com,https://*.example.org"'
has jwt 'value: "2.5"'
has jwt "kind: HTTPRoute"
has jwt 'request: "0s"'
has jwt "terminationGracePeriodSeconds: 80"
has jwt 'value: "60s"'
has jwt "mountPath: /etc/aep-gateway/extra-ca"
has jwt "name: aep-extra-settings"
has jwt "name: aep-aep-gateway-cursor-keys"
hasnt jwt "AEP_API_KEYS"
hasnt jwt "AEP_ALLOW_UNAUTHENTICATED"

# Every AEP_* variable the chart renders must be a flag's environment twin of the binary (`--help` lists
# them as [$AEP_...]); a typo would be ignored silently by the pod. PENDING_FLAGS are flags other changes
# are adding (JWKS, CORS): the chart already carries their values.
PENDING_FLAGS=""
if command -v go >/dev/null 2>&1 && (cd "$ROOT" && go run ./cmd/aep-gateway --help) >"$OUT/help.txt" 2>&1; then
	known="$(grep -o '\[\$AEP_[A-Z0-9_]*\]' "$OUT/help.txt" | tr -d '[]$' | sort -u)"
	for name in $(cat "$OUT"/*.yaml | grep -o 'name: AEP_[A-Z0-9_]*' | cut -d' ' -f2 | sort -u); do
		if grep -qx "$name" <<<"$known"; then
			case " $PENDING_FLAGS " in *" $name "*) log "note: $name is a flag now; drop it from PENDING_FLAGS" ;; esac
		else
			case " $PENDING_FLAGS " in
			*" $name "*) ;;
			*) fail "the chart sets $name, which is no flag of aep-gateway (see aep-gateway --help)" ;;
			esac
		fi
	done
else
	log "go or aep-gateway --help unavailable: env names not checked against the flags"
fi

# Structure, where PyYAML exists: every document parses and names itself; env names are unique.
if python3 -c 'import yaml' 2>/dev/null; then
	paths=()
	for name in "${renders[@]}"; do paths+=("$OUT/$name.yaml"); done
	python3 - "${paths[@]}" <<'EOF' || fail "rendered manifests are not well-formed"
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
refuse no-auth "no authentication" --set auth.generatedKey.enabled=false
refuse embedded-enabled "embedded.enabled is gone" --set embedded.enabled=true
refuse embedded-replicas "at '/replicaCount'" --set replicaCount=3
refuse embedded-hpa "at '/autoscaling/enabled'" --set autoscaling.enabled=true
refuse no-cursor-key "at '/cursorKeys/generate'" --set kafka.brokers=k:9092 --set replicaCount=2 --set cursorKeys.generate=false
refuse both-key-sources "exclude each other" --set kafka.brokers=k:9092 --set auth.existingSecret=s "${KEY[@]}"
refuse two-jwt-sources "one key source" --set auth.jwt.jwks.url=https://i.example/jwks --set auth.jwt.hs256.existingSecret=s
refuse jwks-not-url "http(s) URL" --set auth.jwt.jwks.url=issuer.example
refuse short-grace "shorter than" --set terminationGracePeriodSeconds=20
refuse bad-config-key "is not a flag name" --set config.Write_Timeout=1s
refuse route-no-parent "parentRefs is required" --set httpRoute.enabled=true
# values.schema.json: a misspelt or mistyped value fails instead of being ignored.
refuse schema-typo "additional properties 'replicas' not allowed" --set replicas=3
refuse schema-type "minimum: got 0" --set replicaCount=0
refuse schema-enum "keyStrategy" --set topics.keyStrategy=random
refuse bad-digest "64 hex characters" --set kafka.brokers=k:9092 --set auth.apiKeys[0].tenant=acme --set auth.apiKeys[0].sha256=abc
refuse bad-tenant "must be letters" --set kafka.brokers=k:9092 --set "auth.apiKeys[0].tenant=a b" --set auth.apiKeys[0].sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
refuse bad-sasl "kafka.sasl.mechanism must be" --set kafka.brokers=k:9092 --set kafka.sasl.mechanism=GSSAPI --set kafka.sasl.username=u "${KEY[@]}"
refuse sasl-no-user "kafka.sasl.username is required" --set kafka.brokers=k:9092 --set kafka.sasl.mechanism=PLAIN --set kafka.sasl.password=p "${KEY[@]}"
refuse sasl-no-password "kafka.sasl.existingSecret (or kafka.sasl.password)" --set kafka.brokers=k:9092 --set kafka.sasl.mechanism=PLAIN --set kafka.sasl.username=u "${KEY[@]}"
refuse half-mtls "go together" --set kafka.brokers=k:9092 --set kafka.tls.enabled=true --set kafka.tls.existingSecret=s --set kafka.tls.certKey=tls.crt "${KEY[@]}"
refuse pdb-both "at '/podDisruptionBudget'" --set kafka.brokers=k:9092 --set podDisruptionBudget.minAvailable=1 --set podDisruptionBudget.maxUnavailable=1 "${KEY[@]}"

# Per Kubernetes minor (1.23, 1.28, 1.30, newest): every configuration rendered, linted and decoded strictly
# into the Kubernetes, Gateway API and prometheus-operator Go types, and the PDB, HPA, NetworkPolicy, drain,
# GOMEMLIMIT and schema cases (scripts/chartcheck, a Go module of its own).
if command -v go >/dev/null 2>&1; then
	(cd "$ROOT/scripts/chartcheck" && HELM="$HELM" go test -count=1 ./...) >&2 || fail "scripts/chartcheck: the typed render tests"
else
	fail "go is needed for scripts/chartcheck"
fi

if [ "$failures" != 0 ]; then
	log "$failures check(s) failed"
	exit 1
fi
log "chart lints, renders and refuses as expected"
