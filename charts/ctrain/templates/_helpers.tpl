{{/* The labels every object of the controller carries (as manifests/ sets them). */}}
{{- define "ctrain.labels" -}}
app.kubernetes.io/name: ctrain
app.kubernetes.io/component: controller
{{- end }}

{{/* The image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "ctrain.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* scope is cluster or namespace; anything else stops the render. */}}
{{- define "ctrain.scope" -}}
{{- if not (has .Values.scope (list "cluster" "namespace")) -}}
{{- fail (printf "scope: %q is neither cluster nor namespace" .Values.scope) -}}
{{- end -}}
{{ .Values.scope }}
{{- end }}

{{/* The controller's rights on jobs and their objects; manifests/rbac/clusterrole.yaml says why each. */}}
{{- define "ctrain.rules" -}}
- apiGroups: [ctrain.dev]
  resources: [trainingjobs]
  verbs: [get, list, watch, delete]
- apiGroups: [ctrain.dev]
  resources: [trainingjobs/status]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get, list, watch, create, update]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [update, patch]
- apiGroups: [ctrain.dev]
  resources: [trainingruntimes]
  verbs: [get, list, watch]
{{- end }}
