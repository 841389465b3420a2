"""The chaos suite: real service processes against the mock Kafka cluster and the CQL test server, under
SIGKILLs steered to every protocol point, Kafka and Cassandra faults, standby takeovers and zombies; the
stored counts are compared key by key with a truth built from the producer's delivery reports.

Run it with ``make chaos`` (``python -m tests.chaos --help``); docs/reliability.md is its report."""
