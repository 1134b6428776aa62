{{/* Chart name, overridable. */}}
{{- define "kvtier-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of every object: the release name when it already contains the chart name (release
`kvtier-operator` gives `kvtier-operator`), else `<release>-<chart>`. Cluster-scoped objects
use it too, so two releases never collide.
*/}}
{{- define "kvtier-operator.fullname" -}}
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

{{- define "kvtier-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvtier-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kvtier-operator.labels" -}}
{{ include "kvtier-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: kvtier
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The operator image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "kvtier-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/*
The operator's cluster-wide permissions: the one place they are defined (the plain
manifests and the OLM bundle are rendered from this chart). Secrets are never granted.
The rules for the target kinds (files/targets.yaml: get, list, watch and patch on each
registered kind) are generated from kvtier's target registry by
`python -m kvtier.generate --write`.
*/}}
{{- define "kvtier-operator.clusterRules" -}}
- apiGroups: [kvcache.io]
  resources: [kvcachetiers]
  verbs: [get, list, watch, patch, update]
- apiGroups: [kvcache.io]
  resources: [kvcachetiers/status]
  verbs: [get, patch, update]
- apiGroups: [kvcache.io]
  resources: [kvcachepolicies]
  verbs: [get, list, watch]
- apiGroups: [kvcache.io]
  resources: [kvcachepolicies/status]
  verbs: [get, patch]
{{ .Files.Get "files/targets.yaml" | trim }}
# The scheduler presets and baseRef'd configs the endpoint picker's version comes from.
- apiGroups: [serving.kserve.io]
  resources: [llminferenceserviceconfigs]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [configmaps, nodes, pods]
  verbs: [get, list, watch]
# Apply mode: NVMe PVs, CephFS claims, per-pool StorageClasses (server-side apply).
- apiGroups: [""]
  resources: [persistentvolumes, persistentvolumeclaims]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get, list, watch, create, patch, delete]
# StorageClass NVMe pools: the capacity a class's driver publishes per node. Read only, and
# cluster-wide because drivers publish it in their own namespace; it names no workload.
- apiGroups: [storage.k8s.io]
  resources: [csistoragecapacities]
  verbs: [list, watch]
# The storage probe runs as a Job on the tier's volume.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
# A CephFS tier's evictor (`kvtier evict` on the shared claim) runs as a Deployment beside it;
# only kvtier-labelled ones are watched, and it changes or deletes only its own tier's.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
# The replica-1 CephFS pool, only ever from the KVCachePolicy: kvtier's own CephFilesystem
# (it changes or deletes only the one it labelled as its own).
- apiGroups: [ceph.rook.io]
  resources: [cephfilesystems]
  verbs: [get, list, watch, create, patch, delete]
# core/v1 Events about KVCacheTiers (kvtier.render.event; events.k8s.io is not used).
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
# /metrics: who a scraper's bearer token belongs to, and whether it may get /metrics.
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
{{- end }}

{{/* An opted-in namespace's scheduler ConfigMaps (values.schedulerConfigMaps). */}}
{{- define "kvtier-operator.schedulerConfigMapRules" -}}
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, patch]
{{- end }}

{{/* Leader election happens in the operator's own namespace only. */}}
{{- define "kvtier-operator.leaderElectionRules" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch]
{{- end }}

{{/* The Secret holding the metrics serving certificate (tls.crt, tls.key). */}}
{{- define "kvtier-operator.metricsTLSSecret" -}}
{{- .Values.metrics.tls.secretName | default (printf "%s-metrics-tls" (include "kvtier-operator.fullname" .)) }}
{{- end }}

{{/* Where the operator container reads that Secret. */}}
{{- define "kvtier-operator.metricsTLSDir" -}}
/var/run/secrets/kvtier/metrics-tls
{{- end }}
