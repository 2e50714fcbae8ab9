{{/* Name of the agent's objects. */}}
{{- define "xpu-timer.name" -}}
{{- printf "%s-agent" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "xpu-timer.labels" -}}
app.kubernetes.io/name: xpu-timer-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels that select the agent's pods. */}}
{{- define "xpu-timer.selector" -}}
app.kubernetes.io/name: xpu-timer-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "xpu-timer.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "xpu-timer.name" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "xpu-timer.claim" -}}
{{- .Values.timeline.persistentVolumeClaim.existingClaim | default (printf "%s-timeline" (include "xpu-timer.name" .)) -}}
{{- end -}}
