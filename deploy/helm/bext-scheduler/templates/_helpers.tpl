{{/* The name of every object: the release name, unless it lacks the chart's. */}}
{{- define "bext.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "bext.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bext.labels" -}}
{{ include "bext.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "bext.secretName" -}}
{{- .Values.existingSecret | default (include "bext.fullname" .) -}}
{{- end -}}

{{/* The checks no config validation can make: they need the values. */}}
{{- define "bext.checks" -}}
{{- if le (int .Values.terminationGraceExtraSeconds) 10 -}}
{{- fail (printf "terminationGraceExtraSeconds is %v: it must be above 10, so the pod outlives shutdown_grace + 10s (docs/OPERATING.md, Kubernetes)" .Values.terminationGraceExtraSeconds) -}}
{{- end -}}
{{- if le (int .Values.shutdownGraceSeconds) 0 -}}
{{- fail (printf "shutdownGraceSeconds is %v: it must be a positive number of seconds" .Values.shutdownGraceSeconds) -}}
{{- end -}}
{{- $urlKey := get (dict "redis" "REDIS_URL" "pg" "PG_URL") .Values.locking.backend -}}
{{- if and $urlKey (not .Values.existingSecret) (not (get .Values.secretEnv $urlKey)) -}}
{{- fail (printf "secretEnv.%s is empty: locking.backend %s reads its URL from it (or name your own Secret in existingSecret)" $urlKey .Values.locking.backend) -}}
{{- end -}}
{{- if and (eq .Values.locking.backend "memory") (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "locking.backend memory with replicaCount %v: each pod would hold its own locks and run every require_global tick; use redis or pg" .Values.replicaCount) -}}
{{- end -}}
{{- end -}}
