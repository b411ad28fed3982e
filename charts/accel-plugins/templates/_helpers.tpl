{{/* Chart name, overridable. */}}
{{- define "accel-plugins.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>" unless the release name already holds the chart name. Room is left for "-generic". */}}
{{- define "accel-plugins.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 55 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of one backend's objects. Call with (dict "root" $ "backend" "nvidia"). */}}
{{- define "accel-plugins.componentName" -}}
{{- printf "%s-%s" (include "accel-plugins.fullname" .root) .backend }}
{{- end }}

{{/* Selector labels: stable for the life of a release, so never the chart version. */}}
{{- define "accel-plugins.selectorLabels" -}}
app.kubernetes.io/name: {{ include "accel-plugins.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .backend }}
{{- with .mode }}
accel-plugins.io/kubelet-api: {{ . }}
{{- end }}
{{- with .config }}
accel-plugins.io/config: {{ . }}
{{- end }}
{{- end }}

{{/* Every object's labels. */}}
{{- define "accel-plugins.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "accel-plugins.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: accel-plugins
{{- end }}

{{/* Image reference: registry/repository then @digest or :tag (default appVersion). */}}
{{- define "accel-plugins.image" -}}
{{- $image := .values.image }}
{{- $registry := .root.Values.common.imageRegistry }}
{{- $repository := ternary (printf "%s/%s" $registry $image.repository) $image.repository (ne $registry "") }}
{{- if $image.digest }}
{{- printf "%s@%s" $repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .root.Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/* Name of the ConfigMap a backend reads, or "" when it reads none. */}}
{{- define "accel-plugins.configMapName" -}}
{{- if .values.existingConfigMap }}
{{- .values.existingConfigMap }}
{{- else if .values.configs.map }}
{{- include "accel-plugins.componentName" . }}
{{- else if eq .backend "nvidia" }}
{{- if .values.config }}{{ include "accel-plugins.componentName" . }}{{ end }}
{{- else if include "accel-plugins.genericDevices" .root | fromYamlArray }}
{{- include "accel-plugins.componentName" . }}
{{- end }}
{{- end }}

{{/*
The generic device list as YAML: generic.devices, then the top-level devices (the key of
squat's generic-device-plugin config, so a squat values or config file works as it is).
Call with the root context; read back with fromYamlArray.
*/}}
{{- define "accel-plugins.genericDevices" -}}
{{- toYaml (concat (default list .Values.generic.devices) (default list .Values.devices)) }}
{{- end }}

{{/*
"true" when the NVIDIA plugin may run with a MIG strategy other than none, as NVIDIA's chart
decides it: nvidia.migStrategy, else the rendered config's flags.migStrategy; an existing
ConfigMap may hold any strategy. Call with (dict "root" $ "backend" "nvidia" "values" ...).
*/}}
{{- define "accel-plugins.nvidiaMig" -}}
{{- $v := .values }}
{{- if $v.migStrategy }}
{{- ne $v.migStrategy "none" }}
{{- else if $v.existingConfigMap }}
{{- true }}
{{- else }}
{{- $config := include "accel-plugins.nvidiaConfig" . | fromYaml }}
{{- $flags := default dict $config.flags }}
{{- ne (toString (default "none" $flags.migStrategy)) "none" }}
{{- end }}
{{- end }}

{{/*
"true" when the MPS control daemon runs: nvidia.mps.enabled when true or false, else whether the
rendered config sets sharing.mps. Call with the root context.
*/}}
{{- define "accel-plugins.nvidiaMps" -}}
{{- $v := .Values.nvidia }}
{{- if not $v.enabled }}
{{- false }}
{{- else if kindIs "bool" $v.mps.enabled }}
{{- $v.mps.enabled }}
{{- else }}
{{- $sharing := default dict (default dict $v.config).sharing }}
{{- not (empty $sharing.mps) }}
{{- end }}
{{- end }}

{{/*
"true" when the NVIDIA plugin may run with a CDI device list strategy (cdi-annotations or
cdi-cri), so it writes CDI specs: nvidia.deviceListStrategy when set, else the config's
flags.plugin.deviceListStrategy (a string or a list); an existingConfigMap may hold any, so it
counts, and so does DRA mode, whose default is cdi-cri (self-contained CDI devices, as NVIDIA's
DRA driver answers; issue 35). Call with (dict "root" $ "backend" "nvidia" "values"
.Values.nvidia), plus "mode" where the kubelet API switch runs both modes.
*/}}
{{- define "accel-plugins.nvidiaCdi" -}}
{{- $v := .values }}
{{- /* DRA mode's default strategy is cdi-cri (self-contained CDI devices, as NVIDIA's DRA driver). */}}
{{- $dra := or (eq (default "" .mode) "dra") (and (eq (default "" .mode) "") (eq .root.Values.kubeletApi "dra")) }}
{{- if $v.deviceListStrategy }}
{{- contains "cdi-" $v.deviceListStrategy }}
{{- else if or $v.existingConfigMap $dra }}
{{- true }}
{{- else }}
{{- $config := include "accel-plugins.nvidiaConfig" . | fromYaml }}
{{- $plugin := default dict (default dict $config.flags).plugin }}
{{- $strategy := default "envvar" $plugin.deviceListStrategy }}
{{- contains "cdi-" (ternary (join "," $strategy) (toString $strategy) (kindIs "slice" $strategy)) }}
{{- end }}
{{- end }}

{{/*
The modes the chart runs DaemonSets for, as a JSON list: kubeletApi alone, or with
kubeletApiSwitch.enabled both (device-plugin first), each on its own nodes. Root context.
*/}}
{{- define "accel-plugins.kubeletApiModes" -}}
{{- if .Values.kubeletApiSwitch.enabled }}{{ list "device-plugin" "dra" | toJson }}{{ else }}{{ list .Values.kubeletApi | toJson }}{{ end }}
{{- end }}

{{/* "true" when some node may run in DRA mode: the DRA RBAC and DeviceClasses render. Root context. */}}
{{- define "accel-plugins.draRendered" -}}
{{- or (eq .Values.kubeletApi "dra") .Values.kubeletApiSwitch.enabled }}
{{- end }}

{{/* The DRA drivers' ServiceAccount (kubeletApi dra). Call with the root context. */}}
{{- define "accel-plugins.draServiceAccount" -}}
{{- printf "%s-dra" (include "accel-plugins.fullname" .) }}
{{- end }}

{{/* The plugins' ServiceAccount: the DRA driver's in DRA mode, else the one for health
Events (health-rbac.yaml); empty when the plugins need none. */}}
{{- define "accel-plugins.pluginServiceAccount" -}}
{{- if eq (include "accel-plugins.draRendered" .) "true" }}
{{- include "accel-plugins.draServiceAccount" . }}
{{- else if .Values.healthEvents.enabled }}
{{- printf "%s-plugin" (include "accel-plugins.fullname" .) }}
{{- end }}
{{- end }}

{{/* Values that contradict each other stop the render with a message naming the keys. */}}
{{- define "accel-plugins.validate" -}}
{{- $v := .Values }}
{{- if not (or $v.nvidia.enabled $v.generic.enabled) }}
{{- fail "nothing to deploy: set nvidia.enabled or generic.enabled (or both) to true" }}
{{- end }}
{{- if and $v.nvidia.config $v.nvidia.existingConfigMap }}
{{- fail "nvidia.config and nvidia.existingConfigMap are exclusive: the config comes from values or from an existing ConfigMap, not both" }}
{{- end }}
{{- $devices := include "accel-plugins.genericDevices" . | fromYamlArray }}
{{- if and $v.devices (not $v.generic.enabled) }}
{{- fail "devices lists generic devices but generic.enabled is false: set generic.enabled=true" }}
{{- end }}
{{- if and $devices $v.generic.existingConfigMap }}
{{- fail "generic.devices and generic.existingConfigMap are exclusive (so are devices and generic.existingConfigMap): the config comes from values or from an existing ConfigMap, not both" }}
{{- end }}
{{- if and $v.generic.command (or $devices $v.generic.existingConfigMap $v.generic.configs.map) }}
{{- fail (printf "generic.command %q runs another backend, which takes no generic devices: leave devices, generic.devices, generic.existingConfigMap and generic.configs empty (give its flags in generic.extraArgs)" $v.generic.command) }}
{{- end }}
{{- if and $v.generic.enabled (not $v.generic.command) (not (or $devices $v.generic.existingConfigMap $v.generic.configs.map)) }}
{{- fail "generic.enabled needs devices to expose: set devices, generic.devices or generic.existingConfigMap" }}
{{- end }}
{{- $names := dict }}
{{- range $devices }}
{{- $name := toString (default "" .name) }}
{{- if hasKey $names $name }}
{{- fail (printf "device name %q is listed twice (devices and generic.devices form one list; each name is one resource)" $name) }}
{{- end }}
{{- $_ := set $names $name true }}
{{- end }}
{{- if and (eq $v.common.registration "plugin-watcher") (eq (trimSuffix "/" $v.common.pluginsRegistryDir) (trimSuffix "/" $v.common.pluginDir)) }}
{{- fail "common.pluginsRegistryDir must differ from common.pluginDir in plugin-watcher mode: a resource's two sockets carry the same name" }}
{{- end }}
{{- if and $v.metrics.serviceMonitor.enabled (not (and $v.metrics.enabled $v.metrics.service.enabled)) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled and metrics.service.enabled (it scrapes the Service)" }}
{{- end }}
{{- end }}
