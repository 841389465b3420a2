"""The service: command line, configuration, batch coordinator, Spark plumbing and metrics.

Where things live, one package per concept:

- :mod:`app.commands`: the command line's commands (``python -m app COMMAND``), one module each;
- :mod:`app.service`: the running service: the process, a pipeline's thread, the HTTP endpoints
  (``/metrics``, ``/healthz``, ``/readyz``), health, the checks before Spark starts, background watchers;
- :mod:`app.demo`: the word-count demos;
- :mod:`app.audit`: recounting committed source ranges and comparing them with the stored tables;
- :mod:`app.config`: the YAML configuration, its models and their compilation to the Python API;
- :mod:`app.coordinator`: the batch coordinator, its lease, the txids in flight and its progress log;
- :mod:`app.query`: a sink's current values read on the driver;
- :mod:`app.spark`: a topology run as Spark jobs: process and commit, bad records found on Spark;
- :mod:`app.topology`: the topology API and the batch protocol it runs by;
- :mod:`app.bad_records`: the error policy and the dead-letter topic;
- :mod:`app.metrics`, :mod:`app.logs`, :mod:`app.kafka_offsets`, :mod:`app.migrations`: every Prometheus
  metric, the log set-up, a source's offsets from Kafka, the state tables' layout migrations;
- :mod:`app.failures`: the error vocabulary and the failure policy.

Imports point one way, down these layers (``tests/test_layering.py`` holds the same list): a module imports
its own package and the layers below its own, never a peer of its layer nor a layer above; ``spouts`` and
``states`` never import ``app``.

1. ``app.__main__``
2. ``app.commands``
3. ``app.service``, ``app.demo``
4. ``app.audit``
5. ``app.config``
6. ``app.coordinator``, ``app.query``
7. ``app.spark``
8. ``app.topology``
9. ``app.bad_records``
10. ``app.metrics``, ``app.logs``, ``app.kafka_offsets``, ``app.migrations``
11. ``app.failures``
"""
