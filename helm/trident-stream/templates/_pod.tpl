{{/*
The environment variables the service reads its secrets from, each taken from a key of
secrets.existingSecret (a key left empty is not mapped). See docs/configuration.md, "Environment".
*/}}
{{- define "trident-stream.secretEnv" -}}
{{- $secret := .Values.secrets.existingSecret -}}
{{- if $secret -}}
{{- $vars := dict
      "TRIDENT_KAFKA_SASL_USERNAME" .Values.secrets.keys.kafkaSaslUsername
      "TRIDENT_KAFKA_SASL_PASSWORD" .Values.secrets.keys.kafkaSaslPassword
      "TRIDENT_KAFKA_SSL_KEY_PASSWORD" .Values.secrets.keys.kafkaSslKeyPassword
      "TRIDENT_KAFKA_SSL_KEYSTORE_PASSWORD" .Values.secrets.keys.kafkaSslKeystorePassword
      "TRIDENT_CASSANDRA_USERNAME" .Values.secrets.keys.cassandraUsername
      "TRIDENT_CASSANDRA_PASSWORD" .Values.secrets.keys.cassandraPassword -}}
{{- range $name := keys $vars | sortAlpha }}
{{- $key := get $vars $name }}
{{- if $key }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
Mounts every container of the image needs with a read-only root filesystem: the config, /tmp,
Spark's local dir, and the TLS files when given.
*/}}
{{- define "trident-stream.volumeMounts" -}}
- name: config
  mountPath: /etc/trident/config.yaml
  subPath: config.yaml
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: spark-local
  mountPath: /var/lib/trident/spark
{{- if .Values.tls.existingSecret }}
- name: tls
  mountPath: {{ .Values.tls.mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The volumes behind trident-stream.volumeMounts. */}}
{{- define "trident-stream.volumes" -}}
- name: config
  configMap:
    name: {{ include "trident-stream.fullname" . }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.volumes.tmpSizeLimit }}
- name: spark-local
  emptyDir:
    sizeLimit: {{ .Values.volumes.sparkLocalSizeLimit }}
{{- if .Values.tls.existingSecret }}
- name: tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
{{- end }}
{{- end -}}
