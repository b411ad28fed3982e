{{- /*
CEL for dra-opaque-parameters.yaml: a claim's opaque parameters checked as Prepare checks them
(accel_plugins/backends/nvidia/gpu_config.py parse_gpu_config, dra_sharing.py configured),
with Prepare's messages word for word after the field path. Each define writes one CEL
expression. Values are bound with the one-element-list idiom, [x].map(v, ...)[0], since
cel.bind is not in the API server's admission environment; names ending in _ are such
variables.
*/}}

{{- /* Python's repr() of a scalar JSON value, the CEL variable named: 'text' (or "it's"), None,
True, 5, 1.5, 50.0; a list or object as [...] or {...}. */}}
{{- define "accel-plugins.cel.scalarRepr" -}}
{{- $v := . -}}
(type({{ $v }}) == string ? [{{ $v }}.replace('\\', '\\\\').replace('\n', '\\n').replace('\r', '\\r').replace('\t', '\\t')].map(q_, {{ $v }}.contains("'") && !{{ $v }}.contains('"') ? '"' + q_ + '"' : "'" + q_.replace("'", "\\'") + "'")[0] : type({{ $v }}) == bool ? ({{ $v }} ? 'True' : 'False') : type({{ $v }}) == null_type ? 'None' : type({{ $v }}) == int ? string({{ $v }}) : type({{ $v }}) == double ? ({{ $v }} > -1e16 && {{ $v }} < 1e16 && {{ $v }} == double(int({{ $v }})) ? string(int({{ $v }})) + '.0' : string({{ $v }})) : type({{ $v }}) == list ? '[...]' : '{...}')
{{- end }}

{{- /* Python's repr() of a JSON value, the CEL variable named: a scalar, or a list or object of
scalars ({'a': 1}; an object's keys in the order CEL sees them, not always the claim's). */}}
{{- define "accel-plugins.cel.repr" -}}
(type({{ . }}) == list ? '[' + {{ . }}.map(re_, {{ include "accel-plugins.cel.scalarRepr" "re_" }}).join(', ') + ']' : type({{ . }}) == map ? '{' + {{ . }}.map(rk_, {{ include "accel-plugins.cel.scalarRepr" "rk_" }} + ': ' + [{{ . }}[rk_]].map(rv_, {{ include "accel-plugins.cel.scalarRepr" "rv_" }})[0]).join(', ') + '}' : {{ include "accel-plugins.cel.scalarRepr" . }})
{{- end }}

{{- /* Why a value is no memory limit of whole MiB, or '' (gpu_config.py _mib with
util/quantity.py parse_quantity: a number, or a string that matches parse_quantity's regular
expression once stripped, of at least 1Mi). (list VALUE REPR): CEL expressions of the value
and of its repr. */}}
{{- define "accel-plugins.cel.mibError" -}}
{{- $q := index . 0 -}}
[{{ index . 1 }}].map(qr_, type({{ $q }}) == int ? ({{ $q }} < 1048576 ? qr_ + ' is below 1Mi: limits are whole MiB' : '') : type({{ $q }}) == double ? ({{ $q }} < 1048576.0 ? qr_ + ' is below 1Mi: limits are whole MiB' : '') : type({{ $q }}) == string ? (!{{ $q }}.trim().matches('^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$') ? qr_ + " is not a quantity (quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$')" : isQuantity({{ $q }}.trim()) && quantity({{ $q }}.trim()).compareTo(quantity('1Mi')) < 0 ? qr_ + ' is below 1Mi: limits are whole MiB' : '') : qr_ + ' is not a quantity')[0]
{{- end }}

{{- /* The first unknown field of an object (gpu_config.py _known), or '': (list OBJECT PATH
KNOWN...), OBJECT and PATH CEL expressions. Of several, the first in sorted order (the
claim's own order does not reach CEL). */}}
{{- define "accel-plugins.cel.unknownField" -}}
{{- $known := slice . 2 -}}
[{{ index . 0 }}.filter(u_, !(u_ in {{ toJson $known | replace `"` `'` }}))].map(u_, size(u_) == 0 ? '' : {{ index . 1 }} + '.' + u_.min() + ': unknown field (known: {{ join ", " $known }})')[0]
{{- end }}

{{- /* The first non-empty of a list of CEL string expressions, each evaluated only when those
before it gave '': Prepare stops at its first error. */}}
{{- define "accel-plugins.cel.first" -}}
{{- range . }}
[{{ . }}].map(e_, e_ != '' ? e_ :
{{- end }} ''{{ range . }})[0]{{ end }}
{{- end }}

{{- /* Prepare's error for the GpuConfig in CEL variable p_ at path w_ (a CEL string), or '':
parse_gpu_config's checks in its order, then the interval check of dra_sharing.configured.
x_ holds the values looked at, rp_ their reprs. */}}
{{- define "accel-plugins.cel.gpuConfigError" -}}
{{- $stages := list
  (include "accel-plugins.cel.unknownField" (list "p_" "w_" "apiVersion" "kind" "sharing" "driverConfig"))
  `type(x_.apiVersion) == string && x_.apiVersion == 'resource.nvidia.com/v1beta1' ? '' : w_ + '.apiVersion: ' + rp_.apiVersion + " is not 'resource.nvidia.com/v1beta1'"`
  `type(x_.kind) == string && x_.kind == 'GpuConfig' ? '' : w_ + '.kind: ' + rp_.kind + " is not 'GpuConfig' (the only kind served)"`
  `type(d_) == null_type || type(d_) == map ? '' : w_ + '.driverConfig: must be an object, not ' + rp_.driverConfig`
  (printf `type(d_) != map ? '' : %s` (include "accel-plugins.cel.unknownField" (list "d_" "w_ + '.driverConfig'" "driver")))
  `type(d_) == map && 'driver' in d_ && !(type(d_.driver) == string && d_.driver == 'nvidia') ? w_ + '.driverConfig.driver: ' + rp_.driver + ": only 'nvidia' is served" : ''`
  `type(s_) == null_type || type(s_) == map ? '' : w_ + '.sharing: must be an object, not ' + rp_.sharing`
  (printf `type(s_) != map ? '' : %s` (include "accel-plugins.cel.unknownField" (list "s_" "w_ + '.sharing'" "strategy" "timeSlicingConfig" "mpsConfig")))
  `type(s_) == map && type(st_) == string && st_ == 'Fabric' ? w_ + '.sharing.strategy: fabric GPU sharing strategy is not enabled' : ''`
  `type(s_) == map && !(type(st_) == string && st_ in ['TimeSlicing', 'MPS']) ? w_ + '.sharing.strategy: unknown GPU sharing strategy ' + rp_.strategy + ' (known: TimeSlicing, MPS)' : ''`
  `st_ == 'TimeSlicing' && type(m_) != null_type ? w_ + '.sharing.mpsConfig: cannot be used with the TimeSlicing strategy' : ''`
  `st_ == 'TimeSlicing' && type(t_) != null_type && type(t_) != map ? w_ + '.sharing.timeSlicingConfig: must be an object, not ' + rp_.timeSlicingConfig : ''`
  (printf `st_ != 'TimeSlicing' || type(t_) != map ? '' : %s` (include "accel-plugins.cel.unknownField" (list "t_" "w_ + '.sharing.timeSlicingConfig'" "interval")))
  `st_ == 'TimeSlicing' && type(t_) == map && !(type(x_.interval) == string && x_.interval in ['Default', 'Short', 'Medium', 'Long']) ? w_ + '.sharing.timeSlicingConfig.interval: unknown time-slice interval ' + rp_.interval + ' (known: Default, Short, Medium, Long)' : ''`
  `st_ == 'TimeSlicing' && type(t_) == map && x_.interval != 'Default' ? w_ + '.sharing.timeSlicingConfig.interval: ' + x_.interval + ": only Default is served (this driver does not set the GPU's time slice)" : ''`
  `st_ == 'MPS' && type(t_) != null_type ? w_ + '.sharing.timeSlicingConfig: cannot be used with the MPS strategy' : ''`
  `st_ == 'MPS' && type(m_) != null_type && type(m_) != map ? w_ + '.sharing.mpsConfig: must be an object, not ' + rp_.mpsConfig : ''`
  (printf `st_ != 'MPS' || type(m_) != map ? '' : %s` (include "accel-plugins.cel.unknownField" (list "m_" "w_ + '.sharing.mpsConfig'" "defaultActiveThreadPercentage" "defaultPinnedDeviceMemoryLimit" "defaultPerDevicePinnedMemoryLimit")))
  `st_ != 'MPS' || type(m_) != map || type(x_.percentage) == null_type ? '' : type(x_.percentage) != int ? w_ + '.sharing.mpsConfig.defaultActiveThreadPercentage: must be an integer, not ' + rp_.percentage : x_.percentage < 0 ? w_ + '.sharing.mpsConfig.defaultActiveThreadPercentage: must not be negative' : x_.percentage > 100 ? w_ + '.sharing.mpsConfig.defaultActiveThreadPercentage: must not be greater than 100' : ''`
  `st_ != 'MPS' || type(m_) != map || type(x_.perDevice) == null_type || type(x_.perDevice) == map ? '' : w_ + '.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: must be an object, not ' + rp_.perDevice`
  (printf `st_ != 'MPS' || type(m_) != map || type(x_.perDevice) != map ? '' : [x_.perDevice.filter(k_, [x_.perDevice[k_]].map(y_, %s)[0] != '')].map(bad_, size(bad_) == 0 ? '' : [bad_.min()].map(k_, [x_.perDevice[k_]].map(y_, w_ + '.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[' + k_ + ']: ' + %s)[0])[0])[0]` (include "accel-plugins.cel.mibError" (list "y_" "''")) (include "accel-plugins.cel.mibError" (list "y_" (include "accel-plugins.cel.repr" "y_"))))
  (printf `st_ != 'MPS' || type(m_) != map || type(x_.pinned) == null_type ? '' : [%s].map(why_, why_ == '' ? '' : w_ + '.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: ' + why_)[0]` (include "accel-plugins.cel.mibError" (list "x_.pinned" "rp_.pinned")))
-}}
[p_.?sharing.orValue(null)].map(s_,
[p_.?driverConfig.orValue(null)].map(d_,
[type(s_) == map ? s_.?strategy.orValue(null) : null].map(st_,
[type(s_) == map ? s_.?timeSlicingConfig.orValue(null) : null].map(t_,
[type(s_) == map ? s_.?mpsConfig.orValue(null) : null].map(m_,
[{
  'apiVersion': dyn(p_.?apiVersion.orValue(null)),
  'kind': dyn(p_.?kind.orValue(null)),
  'driverConfig': dyn(d_),
  'driver': dyn(type(d_) == map ? d_.?driver.orValue(null) : null),
  'sharing': dyn(s_),
  'strategy': dyn(st_),
  'timeSlicingConfig': dyn(t_),
  'interval': dyn(type(t_) == map ? t_.?interval.orValue('Default') : null),
  'mpsConfig': dyn(m_),
  'percentage': dyn(type(m_) == map ? m_.?defaultActiveThreadPercentage.orValue(null) : null),
  'perDevice': dyn(type(m_) == map ? m_.?defaultPerDevicePinnedMemoryLimit.orValue(null) : null),
  'pinned': dyn(type(m_) == map ? m_.?defaultPinnedDeviceMemoryLimit.orValue(null) : null)
}].map(x_,
[x_.transformMap(k_, v_, {{ include "accel-plugins.cel.repr" "v_" }})].map(rp_,
{{- include "accel-plugins.cel.first" $stages }}
)[0])[0])[0])[0])[0])[0])[0]
{{- end }}
