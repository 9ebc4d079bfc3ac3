{{/*
Names. Like zero-to-jupyterhub (whose objects are plainly `hub`, `proxy-public`, ...), gpuhub's
namespaced objects have fixed names, so the hub-side values in values.yaml (service URL, network
policy selectors, the mounted ConfigMap) are plain data that need no templating. One gpuhub
release per namespace, as with z2jh. Cluster-scoped objects carry release and namespace.
*/}}
{{- define "gpuhub.service.name" -}}gpuhub-service{{- end }}
{{- define "gpuhub.config.name" -}}gpuhub-config{{- end }}
{{- define "gpuhub.service.port" -}}10101{{- end }}
{{- define "gpuhub.cluster.name" -}}
{{- printf "%s-%s-gpuhub" .Release.Namespace .Release.Name | trunc 200 | trimSuffix "-" }}
{{- end }}

{{- define "gpuhub.labels" -}}
app.kubernetes.io/name: gpuhub
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end }}

{{- define "gpuhub.service.selector" -}}
app.kubernetes.io/name: gpuhub
app.kubernetes.io/component: service
{{- end }}

{{/* The namespace user servers and jobs run in (KubeSpawner's default: the hub's own). */}}
{{- define "gpuhub.userNamespace" -}}
{{- .Values.jobs.namespace | default .Release.Namespace }}
{{- end }}

{{/*
Names zero-to-jupyterhub gives its objects (its `jupyterhub.fullname` logic): with its default
`fullnameOverride: ""` they are `hub`, `proxy-public`, ...; with a non-empty override
`<override>-hub`; with a null override `<release>-jupyterhub-hub` (or `<release>-hub` when the
release name already contains "jupyterhub").
*/}}
{{- define "gpuhub.z2jh.prefix" -}}
{{- $z := .Values.jupyterhub | default dict }}
{{- $override := $z.fullnameOverride }}
{{- if kindIs "string" $override }}
{{- if $override }}{{ $override }}-{{ end }}
{{- else }}
{{- $name := $z.nameOverride | default "jupyterhub" }}
{{- if contains $name .Release.Name }}{{ .Release.Name }}-{{ else }}{{ .Release.Name }}-{{ $name }}-{{ end }}
{{- end }}
{{- end }}
{{- define "gpuhub.z2jh.hub" -}}{{ include "gpuhub.z2jh.prefix" . }}hub{{- end }}
{{- define "gpuhub.z2jh.hubSecret" -}}
{{- (((.Values.jupyterhub | default dict).hub | default dict).existingSecret) | default (include "gpuhub.z2jh.hub" .) }}
{{- end }}
{{- define "gpuhub.z2jh.hubServiceAccount" -}}
{{- $sa := (((.Values.jupyterhub | default dict).hub | default dict).serviceAccount | default dict) }}
{{- $sa.name | default (include "gpuhub.z2jh.hub" .) }}
{{- end }}
{{/* hub.baseUrl with exactly one leading and one trailing slash. */}}
{{- define "gpuhub.baseUrl" -}}
{{- $b := (((.Values.jupyterhub | default dict).hub | default dict).baseUrl) | default "/" | trimPrefix "/" | trimSuffix "/" }}
{{- if $b }}/{{ $b }}/{{ else }}/{{ end }}
{{- end }}

{{/* The admin policy: exactly the GPUSpawner traits the hub is configured with. */}}
{{- define "gpuhub.policy" -}}
{{- $hubConfig := (((.Values.jupyterhub | default dict).hub | default dict).config | default dict) }}
{{- $p := $hubConfig.GPUSpawner | default dict }}
images: {{ $p.images | default dict | toJson }}
custom_image_pattern: {{ $p.custom_image_pattern | default "" | toJson }}
gpu_types: {{ $p.gpu_types | default dict | toJson }}
cpu_range: {{ $p.cpu_range | default dict | toJson }}
memory_range: {{ $p.memory_range | default dict | toJson }}
group_limits: {{ $p.group_limits | default dict | toJson }}
default_limits: {{ $p.default_limits | default (dict "max_gpus" 1) | toJson }}
{{- end }}

{{/* Image reference "name:tag" from {name, tag}. */}}
{{- define "gpuhub.imageRef" -}}
{{- if .tag }}{{ .name }}:{{ .tag }}{{ else }}{{ .name }}{{ end }}
{{- end }}

{{/* The default job image: jobs.image, else the single-user image. */}}
{{- define "gpuhub.jobImage" -}}
{{- if .Values.jobs.image.name }}
{{- include "gpuhub.imageRef" .Values.jobs.image }}
{{- else }}
{{- include "gpuhub.imageRef" .Values.jupyterhub.singleuser.image }}
{{- end }}
{{- end }}

{{/* The jobs service image: service.image, else the hub image (it has gpuhub[hub]). */}}
{{- define "gpuhub.serviceImage" -}}
{{- if .Values.service.image.name }}
{{- include "gpuhub.imageRef" .Values.service.image }}
{{- else }}
{{- include "gpuhub.imageRef" .Values.jupyterhub.hub.image }}
{{- end }}
{{- end }}

{{/*
Checks that JSON schema cannot express; each failure is one sentence naming the value.
*/}}
{{- define "gpuhub.validate" -}}
{{- $hub := .Values.jupyterhub.hub }}
{{- $spawner := ((($hub.config | default dict).JupyterHub | default dict).spawner_class) | default "" }}
{{- if not (has $spawner (list "gpu" "gpuhub.GPUSpawner" "gpuhub.kube.GPUSpawner" "gpuhub.hub.gpu_spawner.GPUSpawner")) }}
{{- fail (printf "jupyterhub.hub.config.JupyterHub.spawner_class must be \"gpu\" (gpuhub's GPUSpawner), not %q." $spawner) }}
{{- end }}
{{- $svc := (($hub.services | default dict).gpuhub) }}
{{- if .Values.service.enabled }}
{{- if not $svc }}
{{- fail "jupyterhub.hub.services.gpuhub is missing: the jobs service must be registered with the hub (see values.yaml)." }}
{{- end }}
{{- $want := printf "http://%s:%s" (include "gpuhub.service.name" .) (include "gpuhub.service.port" .) }}
{{- if ne ($svc.url | default "") $want }}
{{- fail (printf "jupyterhub.hub.services.gpuhub.url must be %q (the jobs service this chart runs), not %q." $want ($svc.url | default "")) }}
{{- end }}
{{- end }}
{{- $kueue := .Values.jobs.kueue }}
{{- if and $kueue.createLocalQueue (not $kueue.queueName) }}
{{- fail "jobs.kueue.createLocalQueue needs jobs.kueue.queueName: the name of the LocalQueue to create." }}
{{- end }}
{{- if and $kueue.createLocalQueue (not $kueue.clusterQueue) }}
{{- fail "jobs.kueue.createLocalQueue needs jobs.kueue.clusterQueue: the ClusterQueue the LocalQueue points to." }}
{{- end }}
{{- $policy := ($hub.config.GPUSpawner | default dict) }}
{{- $allLimits := merge (dict "default_limits" ($policy.default_limits | default dict)) ($policy.group_limits | default dict) }}
{{- range $group, $limits := $allLimits }}
{{- range ($limits.gpu_types | default list) }}
{{- if not (hasKey ($policy.gpu_types | default dict) .) }}
{{- fail (printf "jupyterhub.hub.config.GPUSpawner.group_limits.%s.gpu_types names %q, which is not in GPUSpawner.gpu_types." $group .) }}
{{- end }}
{{- end }}
{{- range ($limits.images | default list) }}
{{- if not (hasKey ($policy.images | default dict) .) }}
{{- fail (printf "jupyterhub.hub.config.GPUSpawner.group_limits.%s.images names %q, which is not in GPUSpawner.images." $group .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpuhub.priorityClass.name" -}}
{{- .Values.priorityClass.name | default (printf "%s-gpu-server" (include "gpuhub.cluster.name" .)) }}
{{- end }}

{{/* gpuQuota for the hub's ledger and the jobs service alike (null default: no quota). */}}
{{- define "gpuhub.gpuQuota" -}}
default: {{ if kindIs "invalid" .Values.gpuQuota.default }}null{{ else }}{{ .Values.gpuQuota.default | toJson }}{{ end }}
groups: {{ .Values.gpuQuota.groups | default dict | toJson }}
{{- end }}
