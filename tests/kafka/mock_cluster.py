from spouts.kafka.mock_cluster import *  # noqa: F403 - moved into the product (the demo runs on it)
