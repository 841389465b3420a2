from tests.kafka.fixtures import kafka_cluster  # noqa: F401  (fixture)
