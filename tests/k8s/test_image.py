"""The image built from the Dockerfile, run as a pod: its entrypoint, its non-root user, a read-only root,
and SIGTERM through tini ending the service with exit code 0."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tests.k8s.kit import Cluster
from tests.k8s.peers import PodPeers
from tests.k8s.release import http_json, wait_for
from tests.k8s.report import Report
from tests.k8s.scenario import TABLE, pipeline, scenario

NS = "trident-image"


def pod_manifest(image: str, config: str) -> str:
    volume_mounts = [{"name": "config", "mountPath": "/etc/trident"}, {"name": "tmp", "mountPath": "/tmp"},
                     {"name": "data", "mountPath": "/var/lib/trident/data"},
                     {"name": "spark", "mountPath": "/var/lib/trident/spark"}]
    docs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "config", "namespace": NS},
         "data": {"config.yaml": config}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "service", "namespace": NS},
         "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 60,
                  # no runAsUser: the kubelet starts it only if the image's USER is a numeric non-root id
                  "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                  "containers": [{
                      "name": "service", "image": image, "imagePullPolicy": "Never",
                      "args": ["run", "--config", "/etc/trident/config.yaml"],
                      "resources": {"requests": {"cpu": "100m", "memory": "512Mi"},
                                    "limits": {"cpu": "1", "memory": "1536Mi"}},
                      "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                          "capabilities": {"drop": ["ALL"]}},
                      "volumeMounts": volume_mounts}],
                  "volumes": [{"name": "config", "configMap": {"name": "config"}},
                              {"name": "tmp", "emptyDir": {}}, {"name": "data", "emptyDir": {}},
                              {"name": "spark", "emptyDir": {}}]}},
    ]
    return yaml.safe_dump_all(docs)


@pytest.mark.scenario("image")
def test_the_image_runs_non_root_on_a_read_only_root_and_exits_0_on_sigterm(
        cluster: Cluster, image: str, peers: PodPeers, report: Report, tmp_path: Path) -> None:
    with scenario(report, "image") as fig:
        topic = f"image-{int(time.time())}"
        peers.create_topic(topic, 1)
        config = {"kafka": {"bootstrap_servers": peers.kafka},
                  "spark": {"master": "local[1]", "conf": {"spark.driver.memory": "512m", "spark.ui.enabled": "false"}},
                  "pipelines": [pipeline("words", topic, {"backend": "sqlite", "table": TABLE,
                                                          "sqlite_path": "/var/lib/trident/data/t.db"})]}
        cluster.kubectl("delete", "namespace", NS, "--wait=true", check=False, timeout=180)
        cluster.kubectl("create", "namespace", NS)
        try:
            cluster.kubectl("apply", "-f", "-", input=pod_manifest(image, yaml.safe_dump(config)))
            cluster.kubectl("wait", "-n", NS, "--for=condition=Ready", "pod/service", "--timeout=180s", timeout=200)

            def exec_(*cmd: str) -> tuple[int, str]:
                out = cluster.kubectl("exec", "-n", NS, "service", "--", *cmd, check=False)
                return out.returncode, (out.stdout + out.stderr).strip()

            assert exec_("id", "-u") == (0, "10001")
            code, said = exec_("touch", "/opt/trident/x")
            assert code != 0, said
            assert "Read-only file system" in said, said
            pid1 = exec_("cat", "/proc/1/cmdline")[1].replace("\0", " ").split()
            assert pid1[:5] == ["/usr/bin/tini", "--", "python", "-m", "app"], pid1
            assert pid1[5:] == ["run", "--config", "/etc/trident/config.yaml"], pid1
            java = exec_("java", "-version")
            assert java[0] == 0, java
            assert 'version "17.' in java[1], java
            reader = exec_("python", "-c", "from spouts.kafka.native import available; print(available() or 'loads')")
            assert reader == (0, "loads"), reader  # the native Kafka reader was built into the image
            ip = cluster.json("get", "pod", "-n", NS, "service")["status"]["podIP"]
            wait_for("/healthz of the pod", lambda: http_json(f"http://{ip}:9400/healthz")[0] == 200, 120)
            wait_for("a first commit", lambda: (http_json(f"http://{ip}:9400/readyz")[1]["pipelines"]["words"]
                                                ["committed_txid"] or 0) >= 1, 300, every=2)
            fig["user"] = "uid 10001 (runAsNonRoot admitted the image's USER); root filesystem read-only"
            fig["PID 1"] = " ".join(pid1)
            t0 = time.monotonic()
            assert exec_("kill", "-TERM", "1")[0] == 0  # tini is PID 1: it forwards SIGTERM to the service
            pod = wait_for("the pod to end", lambda: p if (p := cluster.json("get", "pod", "-n", NS, "service"))
                           ["status"].get("phase") in ("Succeeded", "Failed") else {}, 90)
            state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            fig["SIGTERM to exit"] = f"{time.monotonic() - t0:.1f} s, exit code {state['exitCode']}"
            logs = cluster.kubectl("logs", "-n", NS, "service", check=False).stdout
            assert state["exitCode"] == 0, logs[-2000:]
            assert pod["status"]["phase"] == "Succeeded", logs[-2000:]
            assert "SIGTERM: finishing the current txid" in logs
            assert "reading Kafka through confluent-kafka's messages" not in logs
            fig["Kafka reader"] = "native (kafka.reader auto; the image's spouts/kafka/native/_rangeread.so loads)"
        finally:
            cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
