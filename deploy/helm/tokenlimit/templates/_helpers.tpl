{{/* The release's name for every object: <release>-tokenlimit, or the release name when it already says tokenlimit. */}}
{{- define "tokenlimit.fullname" -}}
{{- if contains "tokenlimit" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tokenlimit" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods; they never change across upgrades. */}}
{{- define "tokenlimit.selectorLabels" -}}
app.kubernetes.io/name: tokenlimit
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tokenlimit.labels" -}}
{{ include "tokenlimit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret holding the Redis URL: the one named, or the chart's own. */}}
{{- define "tokenlimit.redisSecret" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "tokenlimit.fullname" .)) -}}
{{- end -}}
