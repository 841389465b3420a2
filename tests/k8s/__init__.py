"""``helm install`` on a real single-node Kubernetes: the image, the chart, standby, Spark executors, upgrades.

Not part of ``make test``: ``make test-k8s`` runs them (``K8S_SCENARIOS=a,b,d`` picks scenarios) and writes
docs/deploy-report.md. The cluster comes from a *realk8s* folder and the servers from a *realstack* folder,
each found beside the clone (``shared/``) or named by ``REALK8S_DIR`` / ``REALSTACK_DIR``.
"""
