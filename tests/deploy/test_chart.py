"""The Helm chart rendered and linted by Helm's Go SDK in every values scenario, each manifest
validated against Kubernetes' strict schemas, the rendered pipeline config accepted by the service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    ROOT,
    Manifest,
    lint,
    notes,
    one,
    render,
    scenario_names,
    scenario_values,
    validate_schema,
)

SCENARIOS = scenario_names()
#: Custom resources of the Prometheus Operator: no Kubernetes schema exists for them (their content
#: is checked below and by promtool in test_rules.py).
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


def test_there_are_at_least_the_five_scenarios() -> None:
    """Defaults, SASL+TLS from an existing Secret, monitoring, Spark on Kubernetes and the topic Job are all rendered."""
    assert {"defaults", "sasl-tls", "monitoring", "spark-k8s", "topics-job"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_chart_lints_clean(scenario: str) -> None:
    """``helm lint --strict`` finds no warning or error with the scenario's values."""
    report = lint(scenario_values(scenario))
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [], problems
    assert problems == [], problems


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_manifest_is_valid_kubernetes(scenario: str) -> None:
    """Every rendered object (and Spark's executor pod template) passes kubernetes-validate in strict mode."""
    manifests = render(scenario_values(scenario))
    checked = []
    for m in manifests:
        if m.kind in OPERATOR_KINDS:
            continue
        kubernetes_validate.validate(m.doc, KUBE_VERSION, strict=True)
        checked.append(m.kind)
        for name, text in (m.doc.get("data") or {}).items():
            if name.endswith("-pod.yaml"):
                kubernetes_validate.validate(yaml.safe_load(text), KUBE_VERSION, strict=True)
                checked.append("Pod")
    assert {"Deployment", "ConfigMap", "Service"} <= set(checked)
    assert all(m.doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "demo" for m in manifests)


def test_strict_validation_catches_a_bad_manifest() -> None:
    """The validator is strict: a Deployment with an unknown field is refused (so the check above can fail)."""
    deployment = one(render({}), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def _config(manifests: list[Manifest], name_suffix: str = "") -> dict[str, Any]:
    return yaml.safe_load(one(manifests, "ConfigMap", name_suffix or "trident-stream")["data"]["config.yaml"])


def _container(manifests: list[Manifest]) -> dict[str, Any]:
    return one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    """The environment Kubernetes gives ``container``: literal values, the pod's name for the
    ``metadata.name`` field, a stand-in for each Secret key; nothing the manifest does not declare."""
    env = {}
    for e in container.get("env", []):
        source = e.get("valueFrom", {})
        if "secretKeyRef" in source:
            env[e["name"]] = f"from-secret-{source['secretKeyRef']['key']}"
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = "demo-pod-0"
        elif "value" in e:
            env[e["name"]] = str(e["value"])
    return env


def _validate_as(command: list[str], config_text: str, container: dict[str, Any],
                 tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m app <command> --config`` on ``config_text`` with only the container's declared environment."""
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_") and k != "POD_NAME"}
    return subprocess.run([sys.executable, "-m", "app", *command, "--config", str(config)], cwd=ROOT,
                          env={**base, **_container_env(container)}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendered_config_passes_app_validate(scenario: str, tmp_path: Path) -> None:
    """``python -m app validate`` accepts the ConfigMap's config with the environment the pod declares (its Secret, its name)."""
    manifests = render(scenario_values(scenario))
    result = _validate_as(["validate"], one(manifests, "ConfigMap", "trident-stream")["data"]["config.yaml"],
                          _container(manifests), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "from-secret" not in result.stdout  # secrets are masked in the printed plan


def test_topic_job_config_validates_with_the_jobs_own_environment(tmp_path: Path) -> None:
    """Spark on Kubernetes with the topic hook: the hook ConfigMap's config (which names the driver pod
    through ``${POD_NAME}``) passes ``app validate`` with the environment the Job's container declares."""
    values = scenario_values("spark-k8s") | scenario_values("topics-job")
    # its Cassandra state takes both credentials from the Secret (the chart maps only the password by default)
    values["secrets"] = {**values["secrets"], "keys": {"cassandraUsername": "cassandra-username"}}
    manifests = render(values)
    job_container = one(manifests, "Job")["spec"]["template"]["spec"]["containers"][0]
    config_text = one(manifests, "ConfigMap", "-topics")["data"]["config.yaml"]
    assert "${POD_NAME}" in config_text  # the case that needs the variable
    result = _validate_as(["validate"], config_text, job_container, tmp_path)
    assert result.returncode == 0, result.stderr


# -- what each scenario must contain ------------------------------------------------------------------


def test_defaults_run_one_hardened_coordinator() -> None:
    """Defaults: one pod, Recreate, probes on /healthz and /readyz, non-root with a read-only root and no capabilities."""
    manifests = render({})
    assert sorted(m.kind for m in manifests) == ["ConfigMap", "Deployment", "PersistentVolumeClaim",
                                                 "PodDisruptionBudget", "Service", "ServiceAccount"]
    deployment = one(manifests, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    c = _container(manifests)
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert c["args"] == ["run", "--config", "/etc/trident/config.yaml"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"]
    assert sc["readOnlyRootFilesystem"]
    assert not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"]
    assert pod["securityContext"]["runAsUser"] != 0
    assert c["resources"]["requests"]
    assert c["resources"]["limits"]
    # a CPU limit by default: the service turns local[*] into local[N] for a limit of N cores, so Spark
    # never takes every core of the node; the request is below it (the service idles between txids)
    assert _config(manifests)["spark"]["master"] == "local[*]"
    assert c["resources"]["limits"]["cpu"] == "2"
    assert c["resources"]["requests"]["cpu"] == "500m"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/tmp", "/var/lib/trident/spark", "/var/lib/trident/data", "/etc/trident/config.yaml"} <= mounts
    assert pod["automountServiceAccountToken"] is False
    assert [e["name"] for e in c["env"]] == ["POD_NAME"]  # no Secret given, none referenced
    assert _config(manifests)["http"] == {"enabled": True, "host": "0.0.0.0", "port": 9400}
    service = one(manifests, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http-metrics"
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert one(manifests, "PodDisruptionBudget")["spec"]["selector"] == spec["selector"]
    # SQLite state on the chart's claim: it outlives the pod and upgrades
    claim = one(manifests, "PersistentVolumeClaim")
    assert {"name": "data", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in pod["volumes"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"] == {
        "storage": "1Gi"}
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    assert "topologySpreadConstraints" not in pod
    assert "standby_ready" not in _config(manifests)["service"]


def test_labels_name_the_component_and_the_system() -> None:
    """Every object is part-of trident-stream; the service, the topic Job and the executor pods each name
    their component (on pods too, never in a selector, which is immutable)."""
    values = scenario_values("spark-k8s") | scenario_values("topics-job")
    manifests = render(values)
    assert all(m.doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "trident-stream" for m in manifests)
    deployment = one(manifests, "Deployment")
    assert deployment["metadata"]["labels"]["app.kubernetes.io/component"] == "coordinator"
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "coordinator"
    assert "app.kubernetes.io/component" not in deployment["spec"]["selector"]["matchLabels"]
    job = one(manifests, "Job")
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "topic-setup"
    executor = yaml.safe_load(one(manifests, "ConfigMap", "-executor")["data"]["executor-pod.yaml"])
    assert executor["metadata"]["labels"]["app.kubernetes.io/component"] == "spark-executor"


def test_startup_probe_holds_liveness_off_until_healthz_answers() -> None:
    c = _container(render({}))
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] == 120


def test_network_policy_admits_metrics_and_this_releases_executors() -> None:
    """Off by default; on, it selects the service pods, admits the metrics port from metricsFrom and the
    driver ports only from this release's executor pods (the labels of the executor pod template)."""
    assert not any(m.kind == "NetworkPolicy" for m in render({}))
    manifests = render(scenario_values("network-policy"))
    policy = one(manifests, "NetworkPolicy")["spec"]
    assert policy["podSelector"] == one(manifests, "Deployment")["spec"]["selector"]
    assert policy["policyTypes"] == ["Ingress"]
    metrics, driver = policy["ingress"]
    assert metrics["ports"] == [{"port": "http-metrics", "protocol": "TCP"}]
    assert metrics["from"] == scenario_values("network-policy")["networkPolicy"]["metricsFrom"]
    executor = yaml.safe_load(one(manifests, "ConfigMap", "-executor")["data"]["executor-pod.yaml"])
    selector = driver["from"][0]["podSelector"]["matchLabels"]
    assert selector.items() <= executor["metadata"]["labels"].items()
    assert {p["port"] for p in driver["ports"]} == {"spark-driver", "spark-blockmgr"}
    # local Spark, no metricsFrom: the metrics port from anywhere, nothing else
    assert one(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]["ingress"] == [
        {"ports": [{"port": "http-metrics", "protocol": "TCP"}]}]


def test_persistence_the_bitnami_way() -> None:
    """An existing claim is used as is (none created); storageClass "-" asks for no class; disabled: an emptyDir."""
    existing = render({"persistence": {"existingClaim": "words-data"}})
    assert not any(m.kind == "PersistentVolumeClaim" for m in existing)
    volumes = one(existing, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "words-data"}} in volumes
    claim = one(render({"persistence": {"storageClass": "-", "size": "20Gi", "accessModes": ["ReadWriteOncePod"],
                                        "annotations": {"helm.sh/resource-policy": "keep"}}}),
                "PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == ""
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOncePod"]
    assert claim["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert one(render({"persistence": {"storageClass": "fast"}}), "PersistentVolumeClaim")["spec"][
        "storageClassName"] == "fast"
    off = render({"persistence": {"enabled": False}})
    assert {"name": "data", "emptyDir": {}} in one(off, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert not any(m.kind == "PersistentVolumeClaim" for m in off)


def test_standby_replicas_roll_one_pod_at_a_time_and_keep_one() -> None:
    """replicaCount 3 on Cassandra: a rolling update that starts a new pod (a standby, Ready by
    service.standby_ready) before it stops an old one, a budget that keeps one pod, spread over nodes and zones."""
    manifests = render(scenario_values("standby"))
    spec = one(manifests, "Deployment")["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert one(manifests, "PodDisruptionBudget")["spec"] == {"minAvailable": 1, "selector": spec["selector"]}
    spread = spec["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert all(c["labelSelector"] == spec["selector"] and c["maxSkew"] == 1 and
               c["matchLabelKeys"] == ["pod-template-hash"] for c in spread)
    assert _config(manifests)["service"]["standby_ready"] is True
    assert not any(m.kind == "PersistentVolumeClaim" for m in manifests)
    assert {"name": "data", "emptyDir": {}} in spec["template"]["spec"]["volumes"]
    own = [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}}}]
    pod = one(render(scenario_values("standby") | {"topologySpreadConstraints": own}), "Deployment")["spec"]["template"]
    assert pod["spec"]["topologySpreadConstraints"] == own


@pytest.mark.parametrize(("values", "complaint"), [
    ({"replicaCount": 2}, "pipeline word-count keeps its state in SQLite"),
    ({"spark": {"kubernetes": {"enabled": True}}}, ("spark.kubernetes.enabled: pipeline word-count keeps its state "
                                                   "in SQLite")),
    ({"persistence": {"enabled": True}}, "replicaCount 3 with persistence.enabled"),
    ({"terminationGracePeriodSeconds": 30}, ("terminationGracePeriodSeconds 30 must exceed "
                                            "config.service.shutdown_grace_s 30")),
    ({"terminationGracePeriodSeconds": 100, "config": {"service": {"shutdown_grace_s": 120}}},
     "terminationGracePeriodSeconds 100 must exceed config.service.shutdown_grace_s 120"),
])
def test_values_that_cannot_work_are_refused_with_the_fix(values: dict[str, Any], complaint: str) -> None:
    """Standby replicas with SQLite state or a data volume, and a kill before the shutdown grace ends, fail the
    render with a message naming the values to change."""
    base = scenario_values("standby") if "persistence" in values else {}
    with pytest.raises(helm.HelmRenderError, match=complaint):
        render(base | values)  # helm install / upgrade / template (helm lint only logs a template's fail)


def test_sasl_tls_credentials_come_from_the_existing_secret() -> None:
    """SASL+TLS: the passwords are env vars from the named Secret's keys, TLS files are mounted, none is in the ConfigMap."""
    values = scenario_values("sasl-tls")
    manifests = render(values)
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in _container(manifests)["env"]
           if "secretKeyRef" in e.get("valueFrom", {})}
    assert env == {"TRIDENT_KAFKA_SASL_PASSWORD": {"name": "trident-credentials", "key": "kafka-password"},
                   "TRIDENT_CASSANDRA_PASSWORD": {"name": "trident-credentials", "key": "cassandra-password"}}
    tls = [v for v in one(manifests, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    assert tls == [{"name": "tls", "secret": {"secretName": "trident-tls"}}]
    assert {"name": "tls", "mountPath": "/etc/trident/tls", "readOnly": True} in _container(manifests)["volumeMounts"]
    config = _config(manifests)
    assert config["kafka"]["properties"]["security.protocol"] == "SASL_SSL"
    assert "password" not in json.dumps(config).lower()
    assert not any(m.kind == "Secret" for m in manifests)


def test_monitoring_objects_match_the_service_and_the_files() -> None:
    """Monitoring: the ServiceMonitor selects the metrics Service's port; the rule and dashboard are the chart's files."""
    manifests = render(scenario_values("monitoring"))
    monitor = one(manifests, "ServiceMonitor")
    service = one(manifests, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": service["spec"]["ports"][0]["name"], "path": "/metrics",
                                             "interval": "15s", "scrapeTimeout": "10s"}]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    rule = one(manifests, "PrometheusRule")
    file_groups = yaml.safe_load((CHART / "rules" / "trident-stream.rules.yaml").read_text())["groups"]
    assert rule["spec"]["groups"][:-1] == file_groups  # then the release's own group (test_rules.py)
    dashboard = one(manifests, "ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Streaming"}
    shipped = json.loads(dashboard["data"]["trident-stream.json"])
    assert shipped | {"uid": "trident-stream", "title": "trident-stream"} == json.loads(
        (CHART / "dashboards" / "trident-stream.json").read_text())
    assert shipped["title"] == f"trident-stream {NAMESPACE}/demo"
    assert len(shipped["uid"]) <= 40
    with helm.Chart.load(CHART) as chart:  # another release: another uid (Grafana keys dashboards by uid)
        other = chart.render(values=scenario_values("monitoring"), name="words", namespace=NAMESPACE, is_install=True)
    other_cm = next(d for t, text in other.items() if t.endswith("dashboard-configmap.yaml")
                    for d in yaml.safe_load_all(text) if d)
    assert json.loads(other_cm["data"]["trident-stream.json"])["uid"] not in {shipped["uid"], "trident-stream"}


def test_spark_on_kubernetes_driver_reaches_its_executor_pods() -> None:
    """Spark on Kubernetes: k8s:// master, RBAC for executor pods, a headless driver Service, a pod template on the same image."""
    manifests = render(scenario_values("spark-k8s"))
    spark = _config(manifests)["spark"]
    conf = spark["conf"]
    assert spark["master"].startswith("k8s://https://")
    driver = one(manifests, "Service", "-driver")
    assert driver["spec"]["clusterIP"] == "None"
    # Executors resolve the driver before the pod is Ready (its first step may need them).
    assert driver["spec"]["publishNotReadyAddresses"] is True
    assert conf["spark.driver.host"] == f"{driver['metadata']['name']}.{NAMESPACE}.svc"
    assert {p["port"] for p in driver["spec"]["ports"]} == {int(conf["spark.driver.port"]),
                                                            int(conf["spark.blockManager.port"])}
    assert driver["spec"]["selector"] == one(manifests, "Deployment")["spec"]["selector"]["matchLabels"]
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.kubernetes.container.image"] == _container(manifests)["image"]
    assert conf["spark.kubernetes.driver.pod.name"] == "${POD_NAME}"
    role = one(manifests, "Role")
    pod_rules = [r for r in role["rules"] if "pods" in r["resources"]]
    assert pod_rules
    assert {"create", "delete", "watch", "list"} <= set(pod_rules[0]["verbs"])
    # client mode: executor pods and their ConfigMap; no Services, no PersistentVolumeClaims
    assert sorted(res for r in role["rules"] for res in r["resources"]) == ["configmaps", "pods"]
    binding = one(manifests, "RoleBinding")
    account = one(manifests, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    template_cm = one(manifests, "ConfigMap", "-executor")
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/trident/spark/executor-pod.yaml"
    executor = yaml.safe_load(template_cm["data"]["executor-pod.yaml"])["spec"]
    command = " ".join(executor["containers"][0]["command"])
    assert command.startswith("/usr/bin/tini -- ")
    assert "KubernetesExecutorBackend" in command
    assert executor["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    # executors fetch the application's files into their working directory: /tmp, never the read-only root
    assert executor["containers"][0]["workingDir"] == "/tmp"
    assert executor["containers"][0]["resources"]["limits"] == {"memory": "4Gi"}
    # each executor pod may use the cores Spark schedules on it, no more
    assert conf["spark.kubernetes.executor.limit.cores"] == conf["spark.executor.cores"]
    # the executor's local dir (shuffle, spill) is a bounded template volume Spark picks up by its name
    assert {"name": "spark-local-dir-1", "emptyDir": {"sizeLimit": "10Gi"}} in executor["volumes"]
    assert {"name": "spark-local-dir-1", "mountPath": "/var/lib/trident/spark"} in \
        executor["containers"][0]["volumeMounts"]


def test_topic_job_is_a_hook_that_runs_topics_apply() -> None:
    """Topic job: a pre-install/pre-upgrade hook Job running ``topics apply`` on a hook ConfigMap created before it."""
    manifests = render(scenario_values("topics-job"))
    job = one(manifests, "Job")
    hook_cm = one(manifests, "ConfigMap", "-topics")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert hook_cm["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook_cm["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"])
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["topics", "apply", "--config", "/etc/trident/config.yaml"]
    assert pod["restartPolicy"] == "Never"
    assert {"name": "config", "configMap": {"name": hook_cm["metadata"]["name"]}} in pod["volumes"]
    assert hook_cm["data"] == one(manifests, "ConfigMap", "demo-trident-stream")["data"]
    assert {e["name"] for e in container["env"]} == {"POD_NAME", "TRIDENT_KAFKA_SASL_PASSWORD",
                                                     "TRIDENT_CASSANDRA_PASSWORD"}
    assert not any(m.kind == "Job" for m in render({}))


def test_long_release_names_stay_within_63_characters() -> None:
    """Names are truncated to 63 characters (DNS labels), suffixed ones included."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=scenario_values("spark-k8s") | scenario_values("topics-job"),
                                name="a" * 53, namespace=NAMESPACE, is_install=True)
    objects = [(d["kind"], d["metadata"]["name"]) for t, text in rendered.items() if not t.endswith("NOTES.txt")
               for d in yaml.safe_load_all(text) if d]
    assert len(objects) == 12
    assert all(len(name) <= 63 for _, name in objects)  # the data claim included
    assert len(set(objects)) == len(objects)  # truncation made no two objects of a kind collide


@pytest.mark.parametrize("scenario", ["defaults", "sasl-tls"])
def test_notes_tell_how_to_query_the_results(scenario: str) -> None:
    """NOTES.txt names the table of each pipeline, with cqlsh for Cassandra state, and the query command."""
    text = notes(scenario_values(scenario))
    assert "python -m app query --config /etc/trident/config.yaml --pipeline " in text
    if scenario == "sasl-tls":
        assert 'cqlsh <cassandra-host> -e "SELECT store, orders, total FROM trident.sales_by_store LIMIT 10;"' in text
    else:
        assert "SQLite table word_counts (word, count) in /var/lib/trident/data/trident.db" in text


# -- values.schema.json, through Helm's own validation -------------------------------------------------

@pytest.mark.parametrize("scenario", SCENARIOS)
def test_schema_accepts_every_scenario(scenario: str) -> None:
    """Helm's schema check accepts each scenario's values."""
    validate_schema(scenario_values(scenario))


@pytest.mark.parametrize(("values", "complaint"), [
    ({"replicaCount": "one"}, "/replicaCount"),
    ({"replicaCount": -1}, "/replicaCount"),
    ({"persistence": {"size": "3 GB"}}, "/persistence/size"),
    ({"resources": {"limits": {"memory": "3 GB"}}}, "/resources/limits/memory"),
    ({"resources": {"requests": {"cpu": "two"}}}, "/resources/requests/cpu"),
    ({"volumes": {"tmpSizeLimit": "big"}}, "/volumes/tmpSizeLimit"),
    ({"volumes": {"sparkLocalSizeLimit": "10 Gi"}}, "/volumes/sparkLocalSizeLimit"),
    ({"topics": {"job": {"resources": {"limits": {"memory": "1gb"}}}}}, "/topics/job/resources/limits/memory"),
    ({"spark": {"kubernetes": {"executor": {"resources": {"limits": {"memory": "4 Gi"}}}}}},
     "/spark/kubernetes/executor/resources/limits/memory"),
    ({"spark": {"kubernetes": {"executor": {"memory": "3 GB"}}}}, "/spark/kubernetes/executor/memory"),
    ({"persistence": {"accessModes": ["ReadWriteSometimes"]}}, "/persistence/accessModes"),
    ({"metrics": {"port": "9400"}}, "/metrics/port"),
    ({"metrics": {"serviceMonitor": {"enabled": "yes"}}}, "/metrics/serviceMonitor/enabled"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"spark": {"kubernetes": {"master": "spark://x:7077"}}}, "/spark/kubernetes/master"),
    ({"config": {"kafka": {"bootstrap_servers": "k:9092"}, "pipelines": []}}, "/config/pipelines"),
    ({"replicas": 1}, "replicas"),
    ({"metrics": {"serviceMonitor": {"enable": True}}}, "enable"),
    ({"secrets": {"keys": {"kafkaSaslPasword": "x"}}}, "kafkaSaslPasword"),
])
def test_schema_rejects_wrong_types_and_unknown_keys(values: dict[str, Any], complaint: str) -> None:
    """Wrong types, out-of-range numbers, bad enums and unknown (misspelt) keys are refused before anything renders."""
    with pytest.raises(helm.HelmValuesError, match=complaint):
        validate_schema(values)
    with pytest.raises(helm.HelmValuesError):
        render(values)
    assert lint(values)["errors"]


def _one_pipeline(**changes: Any) -> dict[str, Any]:
    """The default config with its one pipeline changed (a list is replaced whole when values merge)."""
    config = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    pipeline = {**config["pipelines"][0], **changes}
    if "table" in changes:
        pipeline["state"] = {**pipeline["state"], "table": changes.pop("table")}
        del pipeline["table"]
    return {"config": {**config, "pipelines": [pipeline]}}


@pytest.mark.parametrize(("changes", "complaint"), [
    ({"id": "x'); DROP TABLE t; --"}, "/config/pipelines/0/id"),
    ({"id": "Word-Count"}, "/config/pipelines/0/id"),
    ({"id": "w" * 49}, "/config/pipelines/0/id"),
    ({"table": "word counts"}, "/config/pipelines/0/state"),
    ({"table": "t; DROP TABLE x"}, "/config/pipelines/0/state"),
])
def test_schema_refuses_pipeline_ids_and_tables_the_service_refuses(changes: dict[str, Any], complaint: str) -> None:
    """A pipeline id or table name the service's own rule refuses fails ``helm install`` itself (not a pod
    restarting in a loop); the names the rule accepts pass."""
    with pytest.raises(helm.HelmValuesError, match=complaint):
        validate_schema(_one_pipeline(**changes))
    validate_schema(_one_pipeline(id="orders-by_store2", table="orders_2"))


def test_schema_accepts_kubernetes_quantities() -> None:
    """Millicores, plain and fractional numbers, binary and decimal suffixes pass the quantity patterns."""
    values = {"resources": {"requests": {"cpu": "500m", "memory": "1.5Gi", "ephemeral-storage": "2G"},
                            "limits": {"cpu": 2, "memory": "3072Mi"}},
              "volumes": {"tmpSizeLimit": "512Mi", "sparkLocalSizeLimit": 10737418240},
              "persistence": {"size": "20Gi"}}
    validate_schema(values)
    assert _container(render(values))["resources"]["limits"] == {"cpu": 2, "memory": "3072Mi"}


# -- documentation ------------------------------------------------------------------------------------

def _leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.extend(_leaf_paths(value, f"{path}.") if isinstance(value, dict) and value else [path])
    return out


def test_chart_readme_documents_every_value() -> None:
    """Each value of values.yaml (or the object holding it) has a README row with type, default and meaning,
    and every documented value exists in values.yaml and in values.schema.json."""
    rows = {}
    for line in (CHART / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[1] in {"string", "int", "bool", "list", "object"}:
            rows[cells[0].strip("`")] = cells
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    for leaf in _leaf_paths(defaults):
        parts = leaf.split(".")
        assert any(".".join(parts[:i]) in rows for i in range(len(parts), 0, -1)), f"{leaf} is not documented"
    for path, (_, type_name, default, meaning) in rows.items():
        value, node = defaults, schema
        for part in path.split("."):
            value, node = value[part], node["properties"][part]
        assert meaning, path
        assert default.startswith("`"), path
        assert type_name == {bool: "bool", int: "int", str: "string", list: "list", dict: "object"}[type(value)]
