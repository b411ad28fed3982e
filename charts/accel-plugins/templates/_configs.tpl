{{/*
Per-node configs. <backend>.configs names configs (configs.map, rendered into the backend's
ConfigMap, one key per name; or configs.names, keys of <backend>.existingConfigMap); each named
config gets a DaemonSet of its own that runs on the nodes whose configs.nodeLabel names it, and
the default config's DaemonSet also takes the nodes without the label. The scheduler and the
DaemonSet controller do the choosing, so the plugin needs no API access: relabelling a node
moves that node, and only it, to the other DaemonSet. Helpers take
(dict "root" $ "backend" "nvidia" "values" ... ["config" name]).
*/}}

{{/* The config names as a JSON list: [] without per-node configs. */}}
{{- define "accel-plugins.configNames" -}}
{{- $c := .values.configs }}
{{- if $c.map }}
{{- keys $c.map | sortAlpha | toJson }}
{{- else if and .values.existingConfigMap $c.names }}
{{- $c.names | toJson }}
{{- else }}
{{- list | toJson }}
{{- end }}
{{- end }}

{{/*
The config of unlabelled nodes: configs.default, else NVIDIA's config-manager fallbacks (a
config named "default", else the only one); "" when none applies (then validate fails).
*/}}
{{- define "accel-plugins.defaultConfig" -}}
{{- $names := include "accel-plugins.configNames" . | fromJsonArray }}
{{- if .values.configs.default }}
{{- .values.configs.default }}
{{- else if has "default" $names }}
{{- "default" }}
{{- else if eq (len $names) 1 }}
{{- first $names }}
{{- end }}
{{- end }}

{{/*
The NVIDIA config a DaemonSet reads, as YAML ({} when it comes from an existing ConfigMap): its
named config of configs.map (a map, or YAML text as NVIDIA's chart takes it), else nvidia.config.
*/}}
{{- define "accel-plugins.nvidiaConfig" -}}
{{- $config := .values.config }}
{{- if .config }}{{ $config = get (default dict .values.configs.map) .config }}{{ end }}
{{- if kindIs "string" $config }}{{ $config = fromYaml $config }}{{ end }}
{{- toYaml (default dict $config) }}
{{- end }}

{{/* The DaemonSet's name: "<release>-accel-plugins-<backend>[-<config>]". */}}
{{- define "accel-plugins.daemonSetName" -}}
{{- $name := include "accel-plugins.componentName" . }}
{{- if .config }}{{ $name = printf "%s-%s" $name .config }}{{ end }}
{{- /* With the switch, the DRA DaemonSet is "<name>-dra"; the device plugin's keeps its name. */}}
{{- if eq (toString .mode) "dra" }}{{ $name = printf "%s-dra" $name }}{{ end }}
{{- $name }}
{{- end }}

{{/*
common.affinity, with a named config's node affinity ANDed into every required term: the
config's nodes are those labelled with its name (and, for the default, those without the
label). A node whose label names no config runs no plugin, as NVIDIA's config-manager then
fails: a typo does not silently fall back to another config. With kubeletApiSwitch, the
mode's nodes likewise: those whose kubeletApiSwitch.nodeLabel names it (and, for kubeletApi,
those without the label), so the two modes' DaemonSets never share a node.
*/}}
{{- define "accel-plugins.affinity" -}}
{{- $affinity := deepCopy (default dict .root.Values.common.affinity) }}
{{- /* Each constraint: the node selector terms (ORed) one label allows; every combination of
one term per constraint, ANDed into each of common.affinity's terms, is a term. */}}
{{- $constraints := list }}
{{- if .config }}
{{- $label := .values.configs.nodeLabel }}
{{- $mine := list (list (dict "key" $label "operator" "In" "values" (list .config))) }}
{{- if eq .config (include "accel-plugins.defaultConfig" .) }}
{{- $mine = append $mine (list (dict "key" $label "operator" "DoesNotExist")) }}
{{- end }}
{{- $constraints = append $constraints $mine }}
{{- end }}
{{- if .mode }}
{{- $label := .root.Values.kubeletApiSwitch.nodeLabel }}
{{- $mine := list (list (dict "key" $label "operator" "In" "values" (list .mode))) }}
{{- if eq .mode .root.Values.kubeletApi }}
{{- $mine = append $mine (list (dict "key" $label "operator" "DoesNotExist")) }}
{{- end }}
{{- $constraints = append $constraints $mine }}
{{- end }}
{{- if $constraints }}
{{- $node := default dict $affinity.nodeAffinity }}
{{- $required := default dict (get $node "requiredDuringSchedulingIgnoredDuringExecution") }}
{{- $terms := default (list dict) $required.nodeSelectorTerms }}
{{- range $mine := $constraints }}
{{- $next := list }}
{{- range $theirs := $terms }}
{{- range $expressions := $mine }}
{{- $next = append $next (merge (dict "matchExpressions" (concat (default list $theirs.matchExpressions) $expressions)) (omit $theirs "matchExpressions")) }}
{{- end }}
{{- end }}
{{- $terms = $next }}
{{- end }}
{{- $_ := set $required "nodeSelectorTerms" $terms }}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required }}
{{- $_ := set $affinity "nodeAffinity" $node }}
{{- end }}
{{- if $affinity }}{{ toYaml $affinity }}{{ end }}
{{- end }}

{{/* Per-node config values that contradict each other stop the render. Root context. */}}
{{- define "accel-plugins.validateConfigs" -}}
{{- range $backend := list "nvidia" "generic" }}
{{- $v := index $.Values $backend }}
{{- $c := $v.configs }}
{{- $ctx := dict "root" $ "backend" $backend "values" $v }}
{{- $names := include "accel-plugins.configNames" $ctx | fromJsonArray }}
{{- $single := ternary $v.config (include "accel-plugins.genericDevices" $ | fromYamlArray) (eq $backend "nvidia") }}
{{- if and $c.map $single }}
{{- fail (printf "%s.configs.map and %s are exclusive: one config for every node, or named configs per node" $backend (ternary "nvidia.config" "generic.devices (and devices)" (eq $backend "nvidia"))) }}
{{- end }}
{{- if and $c.map $v.existingConfigMap }}
{{- fail (printf "%s.configs.map and %s.existingConfigMap are exclusive: name the existing ConfigMap's configs in %s.configs.names" $backend $backend $backend) }}
{{- end }}
{{- if and $c.names (not $v.existingConfigMap) }}
{{- fail (printf "%s.configs.names lists keys of %s.existingConfigMap, which is not set (configs in values go in %s.configs.map)" $backend $backend $backend) }}
{{- end }}
{{- if and $names (eq $backend "nvidia") (eq (include "accel-plugins.nvidiaMps" $) "true") }}
{{- fail "nvidia.mps.enabled with nvidia.configs: the MPS control daemon reads one config, so per-node configs cannot run it yet (share with sharing.timeSlicing, or use nvidia.config)" }}
{{- end }}
{{- if $names }}
{{- $default := include "accel-plugins.defaultConfig" $ctx }}
{{- if not $default }}
{{- fail (printf "%s.configs.default must name the config of nodes without the label %s (one of %s)" $backend $c.nodeLabel (join ", " $names)) }}
{{- end }}
{{- if not (has $default $names) }}
{{- fail (printf "%s.configs.default %q is not one of the configs (%s)" $backend $default (join ", " $names)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
