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

{{/* Replicas: the embedded broker holds its data in one pod, so it forces one. */}}
{{- define "aep-gateway.replicas" -}}
{{- if .Values.embedded.enabled }}1{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/* Name of the Secret holding the API key file, and the key inside it. */}}
{{- define "aep-gateway.apiKeysSecret" -}}
{{- default (printf "%s-api-keys" (include "aep-gateway.fullname" .)) .Values.auth.existingSecret }}
{{- end }}
{{- define "aep-gateway.apiKeysKey" -}}
{{- if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretKey }}{{ else }}api-keys{{ end }}
{{- end }}
{{- define "aep-gateway.hasAPIKeys" -}}
{{- if or .Values.auth.existingSecret .Values.auth.apiKeys }}true{{ end }}
{{- end }}

{{/* Name of the Secret holding the SASL password. */}}
{{- define "aep-gateway.saslSecret" -}}
{{- default (printf "%s-kafka-sasl" (include "aep-gateway.fullname" .)) .Values.kafka.sasl.existingSecret }}
{{- end }}

{{/*
Refuse configurations that cannot work, at render time rather than in a crash-looping pod.
*/}}
{{- define "aep-gateway.validate" -}}
{{- if and (not .Values.kafka.brokers) (not .Values.embedded.enabled) }}
{{- fail "kafka.brokers is required (or set embedded.enabled=true for a single-pod trial)" }}
{{- end }}
{{- if and .Values.kafka.brokers .Values.embedded.enabled }}
{{- fail "kafka.brokers and embedded.enabled exclude each other" }}
{{- end }}
{{- if and .Values.embedded.enabled .Values.autoscaling.enabled }}
{{- fail "autoscaling needs an external Kafka cluster: the embedded broker lives in one pod" }}
{{- end }}
{{- if and (not (include "aep-gateway.hasAPIKeys" .)) (not .Values.auth.allowUnauthenticated) }}
{{- fail "auth.apiKeys or auth.existingSecret is required (auth.allowUnauthenticated=true for development only)" }}
{{- end }}
{{- if and .Values.auth.existingSecret .Values.auth.apiKeys }}
{{- fail "auth.apiKeys and auth.existingSecret exclude each other" }}
{{- end }}
{{- range .Values.auth.apiKeys }}
{{- if not (regexMatch "^[A-Za-z0-9][A-Za-z0-9._-]*$" (toString .tenant)) }}
{{- fail (printf "auth.apiKeys: tenant %q must be letters, digits, '.', '_' or '-'" (toString .tenant)) }}
{{- end }}
{{- if not (regexMatch "^[0-9a-fA-F]{64}$" (toString .sha256)) }}
{{- fail (printf "auth.apiKeys: tenant %s: sha256 must be 64 hex characters (printf %%s \"$KEY\" | sha256sum)" (toString .tenant)) }}
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
