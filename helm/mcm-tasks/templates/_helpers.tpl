{{/* Names */}}
{{- define "mcm-tasks.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mcm-tasks.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the machine objects and the Lease (MCM's --namespace). */}}
{{- define "mcm-tasks.controlNamespace" -}}
{{- default .Release.Namespace .Values.controlNamespace -}}
{{- end -}}

{{- define "mcm-tasks.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "mcm-tasks.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "worker") */}}
{{- define "mcm-tasks.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcm-tasks.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mcm-tasks.componentLabels" -}}
{{ include "mcm-tasks.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mcm-tasks.serviceAccountName" -}}
{{- printf "%s-%s" (include "mcm-tasks.fullname" .root) .component -}}
{{- end -}}

{{- define "mcm-tasks.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Redis */}}
{{- define "mcm-tasks.redisSecretName" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else -}}
{{- printf "%s-redis" (include "mcm-tasks.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "mcm-tasks.redisHasPassword" -}}
{{- if or .Values.redis.bundled .Values.redis.existingSecret .Values.redis.password -}}true{{- end -}}
{{- end -}}

{{/* The Redis URL, without credentials: the password goes in MCM_REDIS_PASSWORD from its Secret. */}}
{{- define "mcm-tasks.redisURL" -}}
{{- if .Values.redis.bundled -}}
{{- printf "redis://%s-redis:6379/0" (include "mcm-tasks.fullname" .) -}}
{{- else if not .Values.redis.url -}}
{{- fail "redis.url is required when redis.bundled is false" -}}
{{- else -}}
{{- .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{/* The Redis CA and client certificate, mounted where MCM_REDIS_TLS_*_FILE point. */}}
{{- define "mcm-tasks.redisMounts" -}}
{{- if .Values.redis.tls.caSecret }}
- {name: redis-ca, mountPath: /etc/mcm/redis-ca, readOnly: true}
{{- end }}
{{- if .Values.redis.tls.clientCertSecret }}
- {name: redis-client, mountPath: /etc/mcm/redis-client, readOnly: true}
{{- end }}
{{- end -}}

{{- define "mcm-tasks.redisVolumes" -}}
{{- if .Values.redis.tls.caSecret }}
- name: redis-ca
  secret: {secretName: {{ .Values.redis.tls.caSecret }}, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- if .Values.redis.tls.clientCertSecret }}
- name: redis-client
  secret: {secretName: {{ .Values.redis.tls.clientCertSecret }}, items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}]}
{{- end }}
{{- end -}}

{{/* What every mcm-tasks process gets: Redis, the clusters, the metrics endpoint, the settings. */}}
{{- define "mcm-tasks.env" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
{{- if include "mcm-tasks.redisHasPassword" .root }}
- name: MCM_REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "mcm-tasks.redisSecretName" .root }}, key: {{ .root.Values.redis.passwordKey }}}
{{- end }}
{{- if .root.Values.redis.sentinelPasswordKey }}
- name: MCM_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "mcm-tasks.redisSecretName" .root }}, key: {{ .root.Values.redis.sentinelPasswordKey }}}
{{- end }}
- name: MCM_REDIS_URL
  value: {{ include "mcm-tasks.redisURL" .root | quote }}
{{- if .root.Values.redis.tls.caSecret }}
- name: MCM_REDIS_TLS_CA_FILE
  value: /etc/mcm/redis-ca/ca.crt
{{- end }}
{{- if .root.Values.redis.tls.clientCertSecret }}
- name: MCM_REDIS_TLS_CERT_FILE
  value: /etc/mcm/redis-client/tls.crt
- name: MCM_REDIS_TLS_KEY_FILE
  value: /etc/mcm/redis-client/tls.key
{{- end }}
- name: MCM_NAMESPACE
  value: {{ include "mcm-tasks.controlNamespace" .root | quote }}
- name: MCM_ADDRESS
  value: "0.0.0.0"
- name: MCM_PORT
  value: {{ .root.Values.metrics.port | quote }}
- name: MCM_CONTROL_KUBECONFIG
  value: {{ ternary "/etc/mcm/control/kubeconfig" "inClusterConfig" (not (empty (index .root.Values.controlCluster.kubeconfigSecrets .component | default ""))) | quote }}
{{- if .root.Values.seed.enabled }}
{{- /* seed mode: the namespaces to serve; each one's target cluster comes from its own Secrets */}}
{{- with .root.Values.seed.namespaces }}
- name: MCM_NAMESPACES
  value: {{ join "," . | quote }}
{{- end }}
{{- with .root.Values.seed.namespaceSelector }}
- name: MCM_NAMESPACE_SELECTOR
  value: {{ . | quote }}
{{- end }}
- name: MCM_TARGET_KUBECONFIG_SECRET
  value: {{ .root.Values.seed.targetKubeconfigSecret | quote }}
{{- else }}
- name: MCM_TARGET_KUBECONFIG
  value: {{ if .root.Values.targetCluster.none }}"none"{{ else }}{{ ternary "/etc/mcm/target/kubeconfig" "inClusterConfig" (not (empty (index .root.Values.targetCluster.kubeconfigSecrets .component | default ""))) | quote }}{{ end }}
{{- end }}
{{- end -}}

{{- define "mcm-tasks.kubeconfigVolumes" -}}
{{- $control := index .root.Values.controlCluster.kubeconfigSecrets .component | default "" -}}
{{- $target := index .root.Values.targetCluster.kubeconfigSecrets .component | default "" -}}
{{- if $control }}
- name: control-kubeconfig
  secret: {secretName: {{ $control }}, items: [{key: kubeconfig, path: kubeconfig}]}
{{- end }}
{{- if and $target (not .root.Values.targetCluster.none) }}
- name: target-kubeconfig
  secret: {secretName: {{ $target }}, items: [{key: kubeconfig, path: kubeconfig}]}
{{- end }}
{{- end -}}

{{- define "mcm-tasks.kubeconfigMounts" -}}
{{- if index .root.Values.controlCluster.kubeconfigSecrets .component | default "" }}
- {name: control-kubeconfig, mountPath: /etc/mcm/control, readOnly: true}
{{- end }}
{{- if and (index .root.Values.targetCluster.kubeconfigSecrets .component | default "") (not .root.Values.targetCluster.none) }}
- {name: target-kubeconfig, mountPath: /etc/mcm/target, readOnly: true}
{{- end }}
{{- end -}}

{{/* A pod talks to a cluster in-cluster (needs its ServiceAccount token) unless both kubeconfigs are
Secrets; in seed mode the target clusters' credentials come from Secrets, so only the control's counts. */}}
{{- define "mcm-tasks.needsToken" -}}
{{- $control := index .root.Values.controlCluster.kubeconfigSecrets .component | default "" -}}
{{- $target := index .root.Values.targetCluster.kubeconfigSecrets .component | default "" -}}
{{- if or (not $control) (and (not $target) (not .root.Values.targetCluster.none) (not .root.Values.seed.enabled)) -}}true{{- end -}}
{{- end -}}

{{/* The pod spec of a controller process: (dict "root" $ "component" "worker" "args" (list …) "kube" true "values" .Values.worker) */}}
{{- define "mcm-tasks.podSpec" -}}
{{- $root := .root -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .kube }}
serviceAccountName: {{ include "mcm-tasks.serviceAccountName" . }}
automountServiceAccountToken: {{ ternary true false (eq (include "mcm-tasks.needsToken" .) "true") }}
{{- else }}
automountServiceAccountToken: false
{{- end }}
securityContext: {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: 30
containers:
  - name: {{ .component }}
    image: {{ include "mcm-tasks.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args: {{- toYaml .args | nindent 6 }}
    env:
      {{- include "mcm-tasks.env" . | nindent 6 }}
      {{- with .env }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    envFrom:
      - configMapRef: {name: {{ include "mcm-tasks.fullname" $root }}-settings}
    ports:
      - {name: metrics, containerPort: {{ $root.Values.metrics.port }}, protocol: TCP}
    livenessProbe:
      httpGet: {path: /healthz, port: metrics}
      {{- toYaml $root.Values.probes.liveness | nindent 6 }}
    readinessProbe:
      httpGet: {path: /readyz, port: metrics}
      {{- toYaml $root.Values.probes.readiness | nindent 6 }}
    resources: {{- toYaml .values.resources | nindent 6 }}
    securityContext: {{- toYaml $root.Values.securityContext | nindent 6 }}
    volumeMounts:
      - {name: tmp, mountPath: /tmp}
      {{- include "mcm-tasks.redisMounts" $root | nindent 6 }}
      {{- if .kube }}
      {{- include "mcm-tasks.kubeconfigMounts" . | nindent 6 }}
      {{- end }}
volumes:
  - name: tmp
    emptyDir: {}
  {{- include "mcm-tasks.redisVolumes" $root | nindent 2 }}
  {{- if .kube }}
  {{- include "mcm-tasks.kubeconfigVolumes" . | nindent 2 }}
  {{- end }}
{{- with .values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* One Deployment of a controller process: the same dict as podSpec plus "replicas". */}}
{{- define "mcm-tasks.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "mcm-tasks.fullname" .root }}-{{ .component }}
  namespace: {{ .root.Release.Namespace }}
  labels: {{- include "mcm-tasks.componentLabels" . | nindent 4 }}
spec:
  {{- if not (and (eq .component "worker") (or .root.Values.worker.autoscaling.enabled .root.Values.worker.keda.enabled)) }}
  replicas: {{ .values.replicas }}
  {{- end }}
  revisionHistoryLimit: 3
  selector:
    matchLabels: {{- include "mcm-tasks.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "mcm-tasks.componentLabels" . | nindent 8 }}
        mcm-tasks.gardener.cloud/metrics: "true"
      annotations:
        checksum/settings: {{ toJson .root.Values.settings | sha256sum }}
        {{- with .values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- include "mcm-tasks.podSpec" . | nindent 6 }}
{{- end -}}

{{/* The control cluster's grants of one process in a namespace of machine objects:
(dict "component" "worker" "seed" false). Per-shoot: the Role in controlNamespace, with the informer's
Lease. Seed mode: the same in every served namespace, the Lease apart (in the release namespace), and
Secrets also read one by one and watched: a namespace's target kubeconfig and token come from them. */}}
{{- define "mcm-tasks.controlRules" }}
{{- if eq .component "informer" }}
  # mirror the machine objects and their Secrets into Redis
  - apiGroups: [machine.sapcloud.io]
    resources: [machines, machinesets, machinedeployments, machineclasses]
    verbs: [list, watch]
{{- if .seed }}
  # and the namespace's target-cluster kubeconfig and token, re-read when they change
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch]
{{- else }}
  - apiGroups: [""]
    resources: [secrets]
    verbs: [list, watch]
  # leader election (MCM's --leader-elect-resource-lock=leases)
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
{{- end }}
{{- else }}
  # reconcile: create, adopt (patch) and delete machines and sets (listed while the mirror is not
  # synced); status through its subresource
  - apiGroups: [machine.sapcloud.io]
    resources: [machines, machinesets]
    verbs: [get, list, create, patch, delete]
  - apiGroups: [machine.sapcloud.io]
    resources: [machinedeployments, machineclasses]
    verbs: [get, patch]
  - apiGroups: [machine.sapcloud.io]
    resources: [machines/status, machinesets/status, machinedeployments/status]
    verbs: [update]
  # drain rules (mcm-tasks's own kind): listed by the drain; their Valid condition by the drain-rules job
  - apiGroups: [mcm-tasks.io]
    resources: [machinedrainrules]
    verbs: [list]
  - apiGroups: [mcm-tasks.io]
    resources: [machinedrainrules/status]
    verbs: [update]
{{- if .seed }}
  # the provider's credentials and user data, read on use; their finalizer; and the namespace's
  # target-cluster kubeconfig and token, re-read when they change
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch, patch]
{{- else }}
  # the provider's credentials and user data, read on use; their finalizer
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, patch]
{{- end }}
  # Events on the machine objects; a repeat patches its count (the event correlator)
  - apiGroups: [""]
    resources: [events]
    verbs: [get, create, patch]
  # the same Events through events.k8s.io/v1, where the API server serves it (action, related)
  - apiGroups: [events.k8s.io]
    resources: [events]
    verbs: [get, create, patch]
{{- end }}
{{- end }}
