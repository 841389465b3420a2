from tests.kafka.fixtures import kafka_cluster  # noqa: F401  (fixture)
from tests.service.conftest import kafka  # noqa: F401  (fixture)
