{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "aep-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release-chart unless the release already contains the chart name. */}}
{{- define "aep-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "aep-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "aep-gateway.labels" -}}
helm.sh/chart: {{ include "aep-gateway.chart" . }}
{{ include "aep-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: aep-gateway
{{- end }}

{{- define "aep-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "aep-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "aep-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "aep-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "aep-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The embedded broker runs when no external cluster is named, as in the binary. */}}
{{- define "aep-gateway.embedded" -}}
{{- if not (trim (toString .Values.kafka.brokers)) }}true{{ end }}
{{- end }}

{{- define "aep-gateway.replicas" -}}
{{- int .Values.replicaCount }}
{{- end }}

{{/* More than one pod may run at once: several replicas or an autoscaler. */}}
{{- define "aep-gateway.multiPod" -}}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/* Name of the Secret holding the API key file, and the key inside it. */}}
{{- define "aep-gateway.apiKeysSecret" -}}
{{- default (printf "%s-api-keys" (include "aep-gateway.fullname" .)) .Values.auth.existingSecret }}
{{- end }}
{{- define "aep-gateway.apiKeysKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretKey }}{{ else }}api-keys{{ end }}
{{- end }}
{{- define "aep-gateway.hasJWT" -}}
{{- $j := .Values.auth.jwt }}
{{- if or $j.hs256.existingSecret $j.publicKey.pem $j.publicKey.existingSecret $j.jwks.url $j.jwks.existingSecret }}true{{ end }}
{{- end }}
{{/* The chart generates a trial API key when nothing else authenticates. */}}
{{- define "aep-gateway.generatedKey" -}}
{{- if and .Values.auth.generatedKey.enabled (not .Values.auth.apiKeys) (not .Values.auth.existingSecret) (not (include "aep-gateway.hasJWT" .)) (not .Values.auth.allowUnauthenticated) }}true{{ end }}
{{- end }}
{{- define "aep-gateway.hasAPIKeys" -}}
{{- if or .Values.auth.existingSecret .Values.auth.apiKeys (include "aep-gateway.generatedKey" .) }}true{{ end }}
{{- end }}
{{- define "aep-gateway.dev" -}}
{{- if and (not (include "aep-gateway.hasAPIKeys" .)) (not (include "aep-gateway.hasJWT" .)) }}true{{ end }}
{{- end }}

{{/* Name of the Secret holding the SASL password. */}}
{{- define "aep-gateway.saslSecret" -}}
{{- default (printf "%s-kafka-sasl" (include "aep-gateway.fullname" .)) .Values.kafka.sasl.existingSecret }}
{{- end }}

{{/* The cursor key file: the operator's Secret, or one the chart generates (and keeps). */}}
{{- define "aep-gateway.cursorKeysSecret" -}}
{{- default (printf "%s-cursor-keys" (include "aep-gateway.fullname" .)) .Values.cursorKeys.existingSecret }}
{{- end }}
{{- define "aep-gateway.cursorKeysKey" -}}
{{- if .Values.cursorKeys.existingSecret }}{{ .Values.cursorKeys.existingSecretKey }}{{ else }}cursor-keys{{ end }}
{{- end }}
{{- define "aep-gateway.hasCursorKeys" -}}
{{- if or .Values.cursorKeys.existingSecret .Values.cursorKeys.generate }}true{{ end }}
{{- end }}

{{/*
A value the chart generated once and must keep across upgrades (cursor keys, the trial API key):
the same key of the live Secret when it exists (helm lookup; empty under `helm template`), else the
fresh value given. Call with (list $ secretName key freshValue); returns the plain (decoded) value.
*/}}
{{- define "aep-gateway.kept" -}}
{{- $root := index . 0 }}
{{- $live := lookup "v1" "Secret" $root.Release.Namespace (index . 1) }}
{{- $data := dig "data" (dict) $live }}
{{- if hasKey $data (index . 2) }}
{{- index $data (index . 2) | b64dec }}
{{- else }}
{{- index . 3 }}
{{- end }}
{{- end }}

{{/*
GOMEMLIMIT of the container: embedded.goMemLimit in embedded mode; otherwise goMemLimit, or, when that is
empty, 90% of resources.limits.memory (Mi, Gi, M or G, or bytes), so the collector works harder before the
kernel kills the pod. Empty when there is no limit to derive it from.
*/}}
{{- define "aep-gateway.goMemLimit" -}}
{{- if and (include "aep-gateway.embedded" .) .Values.embedded.goMemLimit }}
{{- .Values.embedded.goMemLimit }}
{{- else if .Values.goMemLimit }}
{{- .Values.goMemLimit }}
{{- else }}
{{- $lim := toString (dig "limits" "memory" "" (.Values.resources | default dict)) }}
{{- $mib := 0 }}
{{- if regexMatch "^[0-9]+Gi$" $lim }}{{ $mib = mul (trimSuffix "Gi" $lim | int64) 1024 }}
{{- else if regexMatch "^[0-9]+Mi$" $lim }}{{ $mib = trimSuffix "Mi" $lim | int64 }}
{{- else if regexMatch "^[0-9]+G$" $lim }}{{ $mib = div (mul (trimSuffix "G" $lim | int64) 1000000000) 1048576 }}
{{- else if regexMatch "^[0-9]+M$" $lim }}{{ $mib = div (mul (trimSuffix "M" $lim | int64) 1000000) 1048576 }}
{{- else if regexMatch "^[0-9]+$" $lim }}{{ $mib = div ($lim | int64) 1048576 }}
{{- end }}
{{- if gt (int64 $mib) 0 }}{{ printf "%dMiB" (div (mul $mib 9) 10) }}{{ end }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds: given, or preStop sleep + drain delay + shutdown timeout + 10 s. */}}
{{- define "aep-gateway.grace" -}}
{{- $need := add (int .Values.preStop.sleepSeconds) (int .Values.drainDelaySeconds) (int .Values.shutdownTimeoutSeconds) }}
{{- if kindIs "string" .Values.terminationGracePeriodSeconds }}
{{- if .Values.terminationGracePeriodSeconds }}{{ int .Values.terminationGracePeriodSeconds }}{{ else }}{{ add $need 10 }}{{ end }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
Refuse configurations that cannot work, at render time rather than in a crash-looping pod.
*/}}
{{- define "aep-gateway.validate" -}}
{{- if hasKey .Values "embedded" }}{{ if hasKey .Values.embedded "enabled" }}
{{- fail "embedded.enabled is gone: the embedded broker runs exactly when kafka.brokers is empty" }}
{{- end }}{{ end }}
{{- if and (include "aep-gateway.embedded" .) (include "aep-gateway.multiPod" .) }}
{{- fail (printf "replicaCount %v / autoscaling needs an external Kafka: set kafka.brokers (the embedded broker lives in one pod)" .Values.replicaCount) }}
{{- end }}
{{- if and (include "aep-gateway.multiPod" .) (not (include "aep-gateway.hasCursorKeys" .)) }}
{{- fail "more than one pod needs a shared cursor key: set cursorKeys.existingSecret or cursorKeys.generate=true (each pod would otherwise sign with its own random key and resumes on another pod would fail)" }}
{{- end }}
{{- if and (eq .Values.audit.seal "on") (not (include "aep-gateway.embedded" .)) (not .Values.audit.signingKey.existingSecret) }}
{{- fail "audit.seal=on on a real cluster needs audit.signingKey.existingSecret: a Secret holding the Ed25519 signing key (docs/audit.md)" }}
{{- end }}
{{- if not (or (include "aep-gateway.hasAPIKeys" .) (include "aep-gateway.hasJWT" .) .Values.auth.allowUnauthenticated) }}
{{- fail "no authentication: set auth.apiKeys, auth.existingSecret, auth.jwt.*, or auth.generatedKey.enabled=true (auth.allowUnauthenticated=true for development only)" }}
{{- end }}
{{- if and .Values.auth.existingSecret .Values.auth.apiKeys }}
{{- fail "auth.apiKeys and auth.existingSecret exclude each other" }}
{{- end }}
{{- $j := .Values.auth.jwt }}
{{- $jwtSources := 0 }}
{{- if $j.hs256.existingSecret }}{{ $jwtSources = add1 $jwtSources }}{{ end }}
{{- if or $j.publicKey.pem $j.publicKey.existingSecret }}{{ $jwtSources = add1 $jwtSources }}{{ end }}
{{- if or $j.jwks.url $j.jwks.existingSecret }}{{ $jwtSources = add1 $jwtSources }}{{ end }}
{{- if gt $jwtSources 1 }}
{{- fail "auth.jwt: set one key source of hs256, publicKey and jwks" }}
{{- end }}
{{- if and $j.publicKey.pem $j.publicKey.existingSecret }}
{{- fail "auth.jwt.publicKey: pem and existingSecret exclude each other" }}
{{- end }}
{{- if and $j.jwks.url $j.jwks.existingSecret }}
{{- fail "auth.jwt.jwks: url and existingSecret exclude each other" }}
{{- end }}
{{- if and $j.jwks.url (not (hasPrefix "https://" $j.jwks.url)) (not (hasPrefix "http://" $j.jwks.url)) }}
{{- fail "auth.jwt.jwks.url must be an http(s) URL" }}
{{- end }}
{{- if and .Values.auth.generatedKey.enabled (not (regexMatch "^[A-Za-z0-9][A-Za-z0-9._-]*$" (toString .Values.auth.generatedKey.tenant))) }}
{{- fail "auth.generatedKey.tenant must be letters, digits, '.', '_' or '-'" }}
{{- end }}
{{- range $k, $v := .Values.config }}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]*$" $k) }}
{{- fail (printf "config: %q is not a flag name (lower case, digits and '-', e.g. write-timeout)" $k) }}
{{- end }}
{{- end }}
{{- $grace := int (include "aep-gateway.grace" .) }}
{{- $need := add (int .Values.preStop.sleepSeconds) (int .Values.drainDelaySeconds) (int .Values.shutdownTimeoutSeconds) }}
{{- if lt $grace $need }}
{{- fail (printf "terminationGracePeriodSeconds %d is shorter than preStop.sleepSeconds + drainDelaySeconds + shutdownTimeoutSeconds = %d: pods would be killed mid-drain" $grace $need) }}
{{- end }}
{{- if and (gt (int .Values.preStop.sleepSeconds) 0) (not .Values.lifecycle) (semverCompare "<1.30-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "preStop.sleepSeconds needs Kubernetes 1.30+ (the sleep action; the image has no shell), this is %s: use drainDelaySeconds, which the gateway serves itself" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if and .Values.podDisruptionBudget.minAvailable .Values.podDisruptionBudget.maxUnavailable }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- if and .Values.httpRoute.enabled (not .Values.httpRoute.parentRefs) }}
{{- fail "httpRoute.parentRefs is required with httpRoute.enabled (the Gateway to attach to)" }}
{{- end }}
{{- if and .Values.serverTLS.enabled (not .Values.serverTLS.existingSecret) (not .Values.serverTLS.certManager.issuerRef.name) }}
{{- fail "serverTLS.enabled needs serverTLS.existingSecret (a kubernetes.io/tls Secret) or serverTLS.certManager.issuerRef.name" }}
{{- end }}
{{- range .Values.auth.apiKeys }}
{{- if not (regexMatch "^[A-Za-z0-9][A-Za-z0-9._-]*$" (toString .tenant)) }}
{{- fail (printf "auth.apiKeys: tenant %q must be letters, digits, '.', '_' or '-'" (toString .tenant)) }}
{{- end }}
{{- if .cert }}
{{- if not (regexMatch "^[!-~]{1,256}$" (toString .cert)) }}
{{- fail (printf "auth.apiKeys: tenant %s: cert (a client certificate's subject CN) must be 1 to 256 printable ASCII characters without spaces" (toString .tenant)) }}
{{- end }}
{{- else if not (regexMatch "^[0-9a-fA-F]{64}$" (toString .sha256)) }}
{{- fail (printf "auth.apiKeys: tenant %s: sha256 must be 64 hex characters (printf %%s \"$KEY\" | sha256sum)" (toString .tenant)) }}
{{- end }}
{{- if and .principal (not (regexMatch "^[!-~]{1,256}$" (toString .principal))) }}
{{- fail (printf "auth.apiKeys: tenant %s: principal must be 1 to 256 printable ASCII characters without spaces" (toString .tenant)) }}
{{- end }}
{{- range (default list .scopes) }}
{{- if not (regexMatch "^(control|(subscribe|read|write|emit):[!-~]{1,250})$" (toString .)) }}
{{- fail (printf "auth.apiKeys: scope %q: want subscribe:<types>, read:<domain>, write:<domain>, emit:<source> or control (docs/security.md)" (toString .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $mech := upper (toString .Values.kafka.sasl.mechanism) }}
{{- if and $mech (not (has $mech (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512"))) }}
{{- fail "kafka.sasl.mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512" }}
{{- end }}
{{- if and $mech (not .Values.kafka.sasl.username) }}
{{- fail "kafka.sasl.username is required with kafka.sasl.mechanism" }}
{{- end }}
{{- if and $mech (not .Values.kafka.sasl.existingSecret) (not .Values.kafka.sasl.password) }}
{{- fail "kafka.sasl.existingSecret (or kafka.sasl.password) is required with kafka.sasl.mechanism" }}
{{- end }}
{{- if ne (empty .Values.kafka.tls.certKey) (empty .Values.kafka.tls.keyKey) }}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey go together" }}
{{- end }}
{{- if and .Values.kafka.tls.certKey (not .Values.kafka.tls.existingSecret) }}
{{- fail "kafka.tls.certKey needs kafka.tls.existingSecret" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled .Values.podDisruptionBudget.minAvailable .Values.podDisruptionBudget.maxUnavailable }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- end }}

{{/* The container port the probes and the ServiceMonitor use: admin when service.adminPort is set. */}}
{{- define "aep-gateway.adminPortName" -}}
{{- if gt (int .Values.service.adminPort) 0 }}admin{{ else }}http{{ end }}
{{- end }}

{{/* The Secret of the gateway's own TLS pair. */}}
{{- define "aep-gateway.serverTLSSecret" -}}
{{- default (printf "%s-tls" (include "aep-gateway.fullname" .)) .Values.serverTLS.existingSecret }}
{{- end }}

{{/* Set when the probes reach the TLS listener (no admin port). */}}
{{- define "aep-gateway.probeHTTPS" -}}
{{- if and .Values.serverTLS.enabled (eq (int .Values.service.adminPort) 0) }}true{{ end }}
{{- end }}
