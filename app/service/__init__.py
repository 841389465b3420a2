"""The running service (``python -m app run``): the process, its pipelines' threads, the HTTP endpoints.

Owns the process's lifecycle (:mod:`.process`: start, signals, clean shutdown), one pipeline's thread and
lease role (:mod:`.runner`), the HTTP endpoints ``/metrics``, ``/healthz``, ``/readyz`` (:mod:`.endpoints`) and
what ``/readyz`` says of a pipeline (:mod:`.health`), the checks before Spark starts (:mod:`.access`), the
container's resources (:mod:`.pod_resources`) and the background watchers of Kafka (:mod:`.kafka_watch`)
and of sharded tables' partitions (:mod:`.partition_watch`), both of the shape :mod:`.watch`.

May import :mod:`app.audit` and what lies below it (``app/__init__.py`` lists the layers); never
:mod:`app.commands`. Its log lines are under ``app.service``.
"""
