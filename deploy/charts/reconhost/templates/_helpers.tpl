{{/* The chart's name, cut to the 63 characters of a label value. */}}
{{- define "reconhost.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects are named after it; a release named like the chart is not doubled. */}}
{{- define "reconhost.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "reconhost.selectorLabels" -}}
app.kubernetes.io/name: {{ include "reconhost.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "reconhost.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "reconhost.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "reconhost.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "reconhost.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "reconhost.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Whether the chart may render a cluster-wide object that may exist already: when it does not
     exist (or `helm template`, which sees no cluster), or when this release owns it. Helm
     refuses to adopt an object it did not create (`make run`, the plain manifests, or another
     release made it), so such an object is left as it is rather than failing the install.
     Call with (list $ (lookup ...)). */}}
{{- define "reconhost.ours" -}}
{{- $root := index . 0 }}
{{- $found := index . 1 }}
{{- if not $found }}true
{{- else }}
{{- $annotations := dig "metadata" "annotations" (dict) $found }}
{{- if and (eq (get $annotations "meta.helm.sh/release-name") $root.Release.Name) (eq (get $annotations "meta.helm.sh/release-namespace") $root.Release.Namespace) }}true{{ end }}
{{- end }}
{{- end }}

{{/* Whether the replicas share the parents (sharding) rather than elect a leader. */}}
{{- define "reconhost.sharded" -}}
{{- if and .Values.sharding.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}
