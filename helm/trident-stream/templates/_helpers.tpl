{{/*
The chart's name, truncated to 63 characters: Kubernetes names and label values are DNS labels
(RFC 1123), which are at most 63 characters long.
*/}}
{{- define "trident-stream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The release's full name: "<release>-<chart>", or the release name alone when it already contains
the chart's name. Truncated to 63 characters for the same reason as above.
*/}}
{{- define "trident-stream.fullname" -}}
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

{{/*
A name derived from the full name with a suffix ("-topics", "-driver"): the full name is cut so
that the whole stays within 63 characters.
*/}}
{{- define "trident-stream.suffixed" -}}
{{- $suffix := index . 1 -}}
{{- $base := include "trident-stream.fullname" (index . 0) | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $base $suffix -}}
{{- end -}}

{{/* "name-version" for the helm.sh/chart label ("+" is not allowed in label values). */}}
{{- define "trident-stream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object of the release carries. */}}
{{- define "trident-stream.labels" -}}
helm.sh/chart: {{ include "trident-stream.chart" . }}
{{ include "trident-stream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: trident-stream
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels that select the service's pods (never change them on upgrade: selectors are immutable). */}}
{{- define "trident-stream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trident-stream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The ServiceAccount the pods run as: the chart's own, or an existing one. */}}
{{- define "trident-stream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "trident-stream.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference: a digest wins over a tag; an empty tag means the chart's appVersion. */}}
{{- define "trident-stream.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Where the pipeline config is mounted in every container that reads it. */}}
{{- define "trident-stream.configPath" -}}
/etc/trident/config.yaml
{{- end -}}

{{/* The headless Service executors reach the driver through (Spark on Kubernetes). */}}
{{- define "trident-stream.driverServiceName" -}}
{{- include "trident-stream.suffixed" (list . "driver") -}}
{{- end -}}

{{/*
The pipeline config the service reads: the `config` value, with the HTTP endpoint set to the
port the probes, the Service and the ServiceMonitor use, and, in Spark-on-Kubernetes mode, the
Spark master and the settings that let executor pods reach this pod (the driver).
*/}}
{{- define "trident-stream.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "http" (dict "enabled" true "host" "0.0.0.0" "port" (int .Values.metrics.port)) -}}
{{- if include "trident-stream.standbyReady" . -}}
{{- $service := deepCopy (default (dict) (get $cfg "service")) -}}
{{- if not (hasKey $service "standby_ready") -}}
{{- $_ := set $service "standby_ready" true -}}
{{- end -}}
{{- $_ := set $cfg "service" $service -}}
{{- end -}}
{{- if .Values.spark.kubernetes.enabled -}}
{{- $k := .Values.spark.kubernetes -}}
{{- $spark := deepCopy (default (dict) (get $cfg "spark")) -}}
{{- $conf := deepCopy (default (dict) (get $spark "conf")) -}}
{{- $driverHost := printf "%s.%s.svc" (include "trident-stream.driverServiceName" .) .Release.Namespace -}}
{{- $chartConf := dict
      "spark.submit.deployMode" "client"
      "spark.kubernetes.namespace" .Release.Namespace
      "spark.kubernetes.container.image" (include "trident-stream.image" .)
      "spark.kubernetes.container.image.pullPolicy" .Values.image.pullPolicy
      "spark.kubernetes.driver.pod.name" "${POD_NAME}"
      "spark.kubernetes.executor.podNamePrefix" (include "trident-stream.fullname" . | trunc 40 | trimSuffix "-")
      "spark.kubernetes.executor.podTemplateFile" "/etc/trident/spark/executor-pod.yaml"
      "spark.kubernetes.authenticate.driver.serviceAccountName" (include "trident-stream.serviceAccountName" .)
      "spark.driver.host" $driverHost
      "spark.driver.bindAddress" "0.0.0.0"
      "spark.driver.port" (toString (int $k.driverPort))
      "spark.blockManager.port" (toString (int $k.blockManagerPort))
      "spark.executor.instances" (toString (int $k.executor.instances))
      "spark.executor.cores" (toString (int $k.executor.cores))
      "spark.kubernetes.executor.limit.cores" (toString (int $k.executor.cores))
      "spark.executor.memory" $k.executor.memory
      "spark.local.dir" "/var/lib/trident/spark"
-}}
{{- $_ := set $spark "master" $k.master -}}
{{- $_ := set $spark "conf" (merge $conf $chartConf) -}}
{{- $_ := set $cfg "spark" $spark -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
Refuses values that render but cannot work, each with the values to change:
- standby replicas (replicaCount > 1) with SQLite state: the file belongs to one pod's volume;
  standbys share their state through Cassandra, the production backend;
- Spark executors as pods (spark.kubernetes.enabled) with SQLite state: each executor pod would
  write a file of its own, and the state would split between them;
- terminationGracePeriodSeconds not above config.service.shutdown_grace_s: Kubernetes would kill the
  process while the txid being committed still has grace left.
*/}}
{{- define "trident-stream.validate" -}}
{{- $replicas := int .Values.replicaCount -}}
{{- if gt $replicas 1 -}}
{{- range $p := .Values.config.pipelines -}}
{{- if eq (dig "state" "backend" "sqlite" $p) "sqlite" -}}
{{- fail (printf "replicaCount %d: pipeline %s keeps its state in SQLite, a file on one pod's volume; standby replicas need state.backend cassandra (the production backend), or replicaCount 1" $replicas (toString $p.id)) -}}
{{- end -}}
{{- end -}}
{{- if .Values.persistence.enabled -}}
{{- fail (printf "replicaCount %d with persistence.enabled: the data volume holds SQLite state for one pod; standby replicas keep their state in Cassandra: set persistence.enabled=false" $replicas) -}}
{{- end -}}
{{- end -}}
{{- if .Values.spark.kubernetes.enabled -}}
{{- range $p := .Values.config.pipelines -}}
{{- if eq (dig "state" "backend" "sqlite" $p) "sqlite" -}}
{{- fail (printf "spark.kubernetes.enabled: pipeline %s keeps its state in SQLite, a file on one pod; executor pods would each write their own and split the state: set state.backend cassandra, or spark.kubernetes.enabled=false (a local master)" (toString $p.id)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $grace := dig "service" "shutdown_grace_s" 30 .Values.config -}}
{{- if or (kindIs "float64" $grace) (kindIs "int" $grace) (kindIs "int64" $grace) -}}
{{- if le (float64 .Values.terminationGracePeriodSeconds) (float64 $grace) -}}
{{- fail (printf "terminationGracePeriodSeconds %v must exceed config.service.shutdown_grace_s %v (the txid being committed may take that long after SIGTERM, then Spark stops): raise it, e.g. to %v" .Values.terminationGracePeriodSeconds $grace (add (int $grace) 30)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Standby replicas are Ready while they wait for a lease, so a rolling update can go on. */}}
{{- define "trident-stream.standbyReady" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end -}}
{{- end -}}
