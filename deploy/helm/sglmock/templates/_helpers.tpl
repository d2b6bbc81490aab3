{{/* The release's resource name, within Kubernetes' 63 characters. */}}
{{- define "sglmock.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the release's pods; they never change. */}}
{{- define "sglmock.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sglmock.labels" -}}
{{ include "sglmock.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Where an inline profile is mounted, and the file --profile names. */}}
{{- define "sglmock.profileDir" -}}/etc/sglmock{{- end -}}
{{- define "sglmock.profileFile" -}}profile.yaml{{- end -}}

{{/*
The TCP port of a ZMQ endpoint the replica binds, or "" when it connects.
SGLang's publisher binds an endpoint with "*" or "::" in it ("tcp://*:5557")
and connects to any other ("tcp://router:5557").
*/}}
{{- define "sglmock.bindPort" -}}
{{- if and . (hasPrefix "tcp://" .) (or (contains "*" .) (contains "::" .)) -}}
{{- regexFind "[0-9]+$" . -}}
{{- end -}}
{{- end -}}

{{/* The KV events' topic: the value given, else kv@$(POD_IP):<port>@<served model name>. */}}
{{- define "sglmock.kvTopic" -}}
{{- if .Values.kvEvents.topic -}}
{{- .Values.kvEvents.topic -}}
{{- else -}}
{{- $model := required "kvEvents: the default topic names the served model: set servedModelName (or kvEvents.topic)" .Values.servedModelName -}}
{{- printf "kv@$(POD_IP):%d@%s" (int .Values.port) $model -}}
{{- end -}}
{{- end -}}

{{/* --kv-events-config's JSON, with SGLang's keys (KVEventsConfig). */}}
{{- define "sglmock.kvEventsConfig" -}}
{{- $kv := .Values.kvEvents -}}
{{- $cfg := dict "publisher" "zmq" "endpoint" $kv.endpoint "topic" (include "sglmock.kvTopic" .) "buffer_steps" (int $kv.bufferSteps) "hwm" (int $kv.hwm) "max_queue_size" (int $kv.maxQueueSize) -}}
{{- with $kv.replayEndpoint -}}
{{- $_ := set $cfg "replay_endpoint" . -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}

{{/* The container's arguments: sglmock serve's flags after the image's entrypoint. */}}
{{- define "sglmock.args" -}}
- {{ printf "--port=%d" (int .Values.port) | quote }}
{{- if .Values.profile.inline }}
- {{ printf "--profile=%s/%s" (include "sglmock.profileDir" .) (include "sglmock.profileFile" .) | quote }}
{{- else }}
- {{ printf "--profile=%s" .Values.profile.name | quote }}
{{- end }}
- {{ printf "--speedup=%v" .Values.speedup | quote }}
{{- with .Values.servedModelName }}
- {{ printf "--served-model-name=%s" . | quote }}
{{- end }}
{{- if .Values.metrics.enabled }}
- "--enable-metrics"
{{- end }}
{{- if .Values.kvEvents.enabled }}
- {{ printf "--kv-events-config=%s" (include "sglmock.kvEventsConfig" .) | toJson }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
