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
{{- if and (hasKey $policy "line_order") (ne (toString $policy.line_order) (include "gpuhub.lineOrder" .)) }}
{{- fail (printf "jupyterhub.hub.config.GPUSpawner.line_order is %q but line.order is %q: set only line.order, which the hub, the jobs service and the chart's RBAC share." (toString $policy.line_order) (include "gpuhub.lineOrder" .)) }}
{{- end }}
{{- if and (hasKey $policy "usage_half_life") (ne (toString $policy.usage_half_life) (include "gpuhub.usageHalfLife" .)) }}
{{- fail (printf "jupyterhub.hub.config.GPUSpawner.usage_half_life is %v but line.usageHalfLife is %s: set only line.usageHalfLife." $policy.usage_half_life (include "gpuhub.usageHalfLife" .)) }}
{{- end }}
{{- $hours := .Values.gpuHours | default dict }}
{{- $starts := dict "gpuHours.periodStart" $hours.periodStart }}
{{- $zones := dict "gpuHours.timezone" $hours.timezone }}
{{- $budgets := dict }}
{{- if $hours.default }}{{ $_ := set $budgets "gpuHours.default" $hours.default }}{{ end }}
{{- range $group, $budget := ($hours.groups | default dict) }}
{{- $_ := set $budgets (printf "gpuHours.groups.%s" $group) $budget }}
{{- end }}
{{- range $where, $budget := $budgets }}
{{- $_ := set $starts (printf "%s.periodStart" $where) $budget.periodStart }}
{{- $_ := set $zones (printf "%s.timezone" $where) $budget.timezone }}
{{- end }}
{{- /* As the hub reads periodStart (gpuhub.core.budgets.PeriodStart.parse); tests/deploy/test_helm_budgets.py keeps the two alike. */}}
{{- range $where, $start := $starts }}
{{- if and $start (not (regexMatch `^\s*((?i:mon(d(ay?)?)?|tue(s(d(ay?)?)?)?|wed(n(e(s(d(ay?)?)?)?)?)?|thu(r(s(d(ay?)?)?)?)?|fri(d(ay?)?)?|sat(u(r(d(ay?)?)?)?)?|sun(d(ay?)?)?)\s+|(0?[1-9]|1[0-9]|2[0-8])\s+)?([01]?[0-9]|2[0-3]):[0-5][0-9]\s*$` $start)) }}
{{- fail (printf "%s must be \"HH:MM\", \"<weekday> HH:MM\" or \"<day of month 1-28> HH:MM\" (such as \"monday 00:00\" or \"1 06:00\"), not %q." $where $start) }}
{{- end }}
{{- end }}
{{- range $where, $zone := $zones }}
{{- if and $zone (not (regexMatch `^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$` $zone)) }}
{{- fail (printf "%s must be an IANA time zone such as \"Europe/Berlin\" or \"UTC\", not %q." $where $zone) }}
{{- end }}
{{- end }}
{{- if and $policy.bookings (ne (include "gpuhub.bookings" .) "null") }}
{{- fail "jupyterhub.hub.config.GPUSpawner.bookings and bookings are both set: keep only bookings, which the chart hands to the hub." }}
{{- end }}
{{- if and $policy.gpu_hours (ne (include "gpuhub.gpuHours" .) "null") }}
{{- fail "jupyterhub.hub.config.GPUSpawner.gpu_hours and gpuHours are both set: keep only gpuHours, which the chart hands to the hub." }}
{{- end }}
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

{{/*
GPU-hour budgets for the hub (GPUSpawner.gpu_hours), as JSON: gpuHours with its keys as the
hub spells them (periodStart -> period_start); null while gpuHours has neither a default nor
groups: no budgets (or the ones jupyterhub.hub.config.GPUSpawner.gpu_hours sets itself).
*/}}
{{- define "gpuhub.gpuHours" -}}
{{- $h := .Values.gpuHours | default dict }}
{{- if or $h.default $h.groups }}
{{- $out := dict }}
{{- range $key, $value := $h }}
{{- if kindIs "invalid" $value }}
{{- else if eq $key "default" }}
{{- $_ := set $out "default" (include "gpuhub.budget" $value | fromJson) }}
{{- else if eq $key "groups" }}
{{- $groups := dict }}
{{- range $group, $budget := $value }}
{{- $_ := set $groups $group (include "gpuhub.budget" $budget | fromJson) }}
{{- end }}
{{- $_ := set $out "groups" $groups }}
{{- else }}
{{- $_ := set $out (snakecase $key) $value }}
{{- end }}
{{- end }}
{{- $out | toJson }}
{{- else -}}
null
{{- end }}
{{- end }}
{{/*
GPU bookings for the hub (GPUSpawner.bookings), as JSON with the keys as the hub spells them
(maxGpus -> max_gpus, adminsBookForGroups -> admins_book_for_groups); group names as they
are. null while bookings.groups is empty: no bookings (or hub.config's own bookings).
*/}}
{{- define "gpuhub.bookings" -}}
{{- $b := .Values.bookings | default dict }}
{{- if $b.groups }}
{{- $out := dict }}
{{- range $key, $value := $b }}
{{- if kindIs "invalid" $value }}
{{- else if eq $key "groups" }}
{{- $groups := dict }}
{{- range $group, $rule := $value }}
{{- $_ := set $groups $group (include "gpuhub.budget" $rule | fromJson) }}
{{- end }}
{{- $_ := set $out "groups" $groups }}
{{- else }}
{{- $_ := set $out (snakecase $key) $value }}
{{- end }}
{{- end }}
{{- $out | toJson }}
{{- else -}}
null
{{- end }}
{{- end }}
{{- define "gpuhub.budget" -}}
{{- $out := dict }}
{{- range $key, $value := . }}
{{- $_ := set $out (snakecase $key) $value }}
{{- end }}
{{- $out | toJson }}
{{- end }}

{{/*
The line's order (GPUSpawner.line_order), which the hub, the jobs service and the RBAC for
fair queues share: line.order; a values file's older jupyterhub.hub.config.GPUSpawner.line_order
while line.order is left at fifo (gpuhub.validate refuses the two disagreeing otherwise).
*/}}
{{- define "gpuhub.lineOrder" -}}
{{- $old := dig "hub" "config" "GPUSpawner" "line_order" "" (.Values.jupyterhub | default dict) | toString }}
{{- $new := (.Values.line | default dict).order | default "fifo" }}
{{- if and $old (eq $new "fifo") }}{{ $old }}{{ else }}{{ $new }}{{ end }}
{{- end }}

{{/* Seconds of the fair line's half-life (GPUSpawner.usage_half_life): line.usageHalfLife,
or the older jupyterhub.hub.config.GPUSpawner.usage_half_life while it keeps its default. */}}
{{- define "gpuhub.usageHalfLife" -}}
{{- $old := dig "hub" "config" "GPUSpawner" "usage_half_life" "" (.Values.jupyterhub | default dict) }}
{{- $new := (.Values.line | default dict).usageHalfLife | default 604800 }}
{{- if and (ne (toString $old) "") (eq (float64 $new) 604800.0) }}{{ $old | toJson }}{{ else }}{{ $new | toJson }}{{ end }}
{{- end }}
