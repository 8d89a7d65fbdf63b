{{/* The prefix of every object's name. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains "sluice" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-sluice" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; the component is passed as .component. */}}
{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "sluice.selectorLabels" . }}
{{- end -}}

{{/* The labels that select a component's pods: never change them in an
upgrade, since a Deployment's selector cannot change. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "sluice.upstreamSecret" -}}
{{- .Values.upstream.existingSecret | default (printf "%s-upstream" (include "sluice.fullname" .)) -}}
{{- end -}}

{{- define "sluice.httpTokenSecret" -}}
{{- .Values.central.http.token.existingSecret | default (printf "%s-http-token" (include "sluice.fullname" .)) -}}
{{- end -}}

{{- define "sluice.webhookName" -}}
{{- printf "%s-webhook" (include "sluice.fullname" .) -}}
{{- end -}}

{{/* The restrictive securityContext of every Sluice container: the
image's non-root user, nothing it could escalate to, a read-only root. */}}
{{- define "sluice.securityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A value as a flag's argument. A whole number read from YAML is a
float64 to the template engine, which would print 1000000 as 1e+06. */}}
{{- define "sluice.flagValue" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}
