{{- /* z2jh's labels on its objects: component (hub, proxy) and release. */}}
{{- define "standin.labels" -}}
{{- $ := index . 0 -}}
app: jupyterhub
component: {{ index . 1 }}
release: {{ $.Release.Name }}
app.kubernetes.io/name: jupyterhub
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}
